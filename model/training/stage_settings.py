"""Every training stage's settings, defined once: the trainers (`realm.model.training.train_ict`,
`train_pretrain`, `train_finetune`, which also runs the reader's warm-up), the Prefect flows' forms (`realm.flows.params`, which add
what only the flow reads) and `realm train STAGE --param` all use these classes and their
defaults. The run presets (`realm.flows.params.PipelineParams.preset`) override some of them.
The seed is the run's (`RunParams.seed`), passed to each trainer beside its settings.

Imports pydantic only (no torch), so the flows' parameter models load them cheaply.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from realm.model.tokenization import (
    BLOCK_SPECIAL_TOKENS, MAX_BLOCK_WORDPIECES, MAX_QUESTION_WORDPIECES, QUERY_SPECIAL_TOKENS,
)

# Lengths of the CPU presets, for cheaper steps than the paper's 96 / 288 (the `gpu` preset's).
CPU_QUERY_WORDPIECES = 64
CPU_BLOCK_WORDPIECES = 128
# Sequences per encoder / doc-tower forward in pre-training: on a CPU, length-sorted groups of
# 16 pad little and stay in cache; a GPU wants fewer, larger launches (the `gpu` preset's).
CPU_MICRO_BATCH = 16
DocTowerTraining = Literal["frozen", "projection", "whole"]


class RetentionConfig(BaseModel):
    """How many of its own checkpoints a stage keeps: every stage's settings hold it."""

    # No infinite or NaN number: `epochs=Infinity` would pass every bound and fail mid-stage.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    # Two: if the newest turns out damaged, the run resumes from the one before it.
    keep_checkpoints: int = Field(
        2, ge=1, description="newest checkpoints kept per stage (pre-training: also its newest indexes, embeddings and "
        "doc-tower snapshots); "
        "the best one and any a later stage started from or trains against are kept too",
    )


class IctConfig(RetentionConfig):
    """Inverse Cloze Task warm start of both retriever towers (in-batch negatives)."""

    # 0: the sentence-encoder start, untrained, retrieves better than ICT steps from BERT reach
    # (docs/measurements.md, "Retrieval that helps the masked LM").
    steps: int = Field(0, ge=0)
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(1e-4, gt=0)
    warmup_steps: int = Field(30, ge=0)
    checkpoint_every: int = Field(100, ge=1)
    log_every: int = Field(10, ge=1)
    heldout_examples: int = Field(512, ge=1)
    max_query_wordpieces: int = Field(CPU_QUERY_WORDPIECES, ge=QUERY_SPECIAL_TOKENS + 1)
    max_block_wordpieces: int = Field(CPU_BLOCK_WORDPIECES, gt=BLOCK_SPECIAL_TOKENS, le=MAX_BLOCK_WORDPIECES)
    tower_layers: int | None = Field(6, ge=1, description="transformer layers of both towers (None: the model preset's)")
    retrieval_pooling: Literal["cls", "mean"] = Field(
        "mean", description="cls: REALM's [CLS] state; mean: the mean of the token states (sentence-encoder pooling)"
    )
    projection_init: Literal["random", "pca"] = Field(
        "pca", description="pca: the 128-d projection from the principal directions of pooled contexts"
    )
    # 20 x cosine, the sentence encoder's own scoring (docs/measurements.md, "REALM against ORQA
    # again, from the 20 × cosine start").
    tower_scale: float | None = Field(
        20.0, gt=0, description="None: blocks scored by the inner product of the towers' projections (REALM's); "
        "s: by s times their cosine (the sentence encoder was trained with s = 20)",
    )
    projection_sample: int = Field(4096, ge=1, description="contexts whose pooled vectors the PCA projection is fitted on")


class PretrainConfig(RetentionConfig):
    """REALM pre-training: salient-span MLM over the top-k retrieved blocks.

    The MiniLM warm start ships no MLM head, so the body learns at BERT's pre-training rate and
    the fresh head at its own, higher one. The retriever stays frozen while the fresh head
    learns to read: before that, REALM's reward r(z) = [p(y|z,x)/p(y|x) − 1] p(z|x) is noise
    that collapses p(z|x) onto arbitrary blocks (docs/measurements.md, "The 6-layer encoder").
    """

    steps: int = Field(1000, ge=0)
    batch_size: int = Field(8, ge=1)
    num_candidates: int = Field(
        8, ge=1, description="k, the null document included; 1: the null document alone, the closed-book ablation "
        "(salient-span MLM with no retrieval; neither tower trains)"
    )
    learning_rate: float = Field(1e-4, gt=0, description="peak rate of the encoder's BERT")
    mlm_head_learning_rate: float = Field(
        1e-3, gt=0, description="peak rate of the freshly initialised MLM head's transform and bias (its decoder is "
        "the input embedding, at learning_rate)"
    )
    warmup_steps: int = Field(50, ge=0)
    checkpoint_every: int = Field(50, ge=1)
    log_every: int = Field(10, ge=1)
    heldout_examples: int = Field(256, ge=1)
    max_query_wordpieces: int = Field(CPU_QUERY_WORDPIECES, ge=QUERY_SPECIAL_TOKENS + 1)
    max_block_wordpieces: int = Field(CPU_BLOCK_WORDPIECES, gt=BLOCK_SPECIAL_TOKENS, le=MAX_BLOCK_WORDPIECES)
    micro_batch: int = Field(
        CPU_MICRO_BATCH, ge=1, description="joint and block sequences per encoder / doc-tower forward, grouped by length"
    )
    # Frozen, the doc tower needs no re-embedding of the candidates (docs/measurements.md, "The 6-layer encoder").
    doc_tower: DocTowerTraining = Field(
        "frozen", description="what of the doc tower learns: frozen (candidate vectors from the index, nothing to "
        "refresh); projection (its 128-d projection over pooled block states computed once, the index re-projected at "
        "each refresh); whole (REALM: every candidate re-embedded each step, the corpus at each refresh)"
    )
    random_spans: bool = Field(False, description="ablation: mask random spans instead of salient spans")
    # Half the steps: the head reads by then (docs/measurements.md, "The 6-layer encoder").
    retriever_frozen_steps: int = Field(
        500, ge=0, description="no gradient into either retriever tower before this step, while the fresh MLM head learns to read"
    )
    # REALM's own rate; the body's higher one did not rank the holding block better
    # (docs/measurements.md, "the query tower at the body's rate").
    retriever_learning_rate: float = Field(3e-5, gt=0, description="peak rate of the retriever towers")
    retriever_warmup_steps: int = Field(
        100, ge=0, description="after retriever_frozen_steps, steps over which the towers' rate rises from 0 to the "
        "schedule's, so fresh AdamW moments do not take full-rate steps"
    )
    refresh_every: int = Field(
        100, ge=1, description="steps between asynchronous index refreshes, each swapped in when the next starts "
        "(none with doc_tower frozen)"
    )
    # The pipeline starts worker processes and loads a tower in each at every refresh: it pays
    # off on corpora big enough to spread (docs/corpus.md, "The embedding pipeline").
    refresh_embedder: Literal["in_process", "pipeline"] = Field(
        "in_process", description="what re-embeds the corpus at each refresh: in_process (the flow's process) or "
        "pipeline (realm.pipelines.embed: Beam's RunInference over worker processes)"
    )
    eval_every: int | None = Field(
        None, ge=1, description="steps between held-out masked-span evaluations (None: only after the last step)"
    )
    untrained_eval_examples: int = Field(
        0, ge=0, description="after the last step, also evaluate on up to this many training examples no step has drawn"
    )


class FinetuneConfig(RetentionConfig):
    """Fine-tuning settings: what the trainer, the `realm-finetune-openqa` flow form and
    `realm train finetune --param` all read (the flow's parameters add the data and retriever)."""

    # Four fit the main job's hour on a 2-core CPU (docs/measurements.md, "The default run and its levers").
    epochs: float = Field(
        4.0, ge=0, description="passes over the training questions that carry a loss (ORQA: 20; 0 publishes the start)"
    )
    batch_size: int = Field(8, ge=1)
    # BERT's fine-tuning range is 2e-5..5e-5 (Devlin et al.); the fresh modules learn at their own, higher rate.
    learning_rate: float = Field(5e-5, gt=0, description="peak rate of the query tower and the reader's BERT")
    span_head_learning_rate: float = Field(
        5e-4, gt=0, description="peak rate of the freshly initialised span MLP and question-match vector"
    )
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="share of the steps the learning rate rises over")
    weight_decay: float = Field(0.01, ge=0)
    reader_dropout: float | None = Field(
        None, ge=0, lt=1, description="hidden-state dropout of the reader while it trains (None: the model preset's)"
    )
    # Higher exact match on the dev sets than the last step's weights (docs/measurements.md, "The default run and its levers").
    average_weights: bool = Field(
        True, description="validate and publish a moving average of the steps' weights, leaning to the later ones, "
        "instead of the last step's (realm.model.training.weight_average)",
    )
    # Kept for higher exact match on two seeds (docs/measurements.md, "The span features' second seed").
    span_features: bool = Field(
        True, description="the span MLP also reads each span's width, its distance to the block's nearest word the "
        "question says and whether it holds one, as learned vectors from zero trained at span_head_learning_rate "
        "(realm.model.networks.span_features)",
    )
    checkpoint_every: int = Field(200, ge=1, description="steps between checkpoints, each validated")
    log_every: int = Field(10, ge=1)
    num_read: int = Field(5, ge=1, description="blocks the reader reads per question (REALM and ORQA: 5)")
    num_candidates: int = Field(
        20, ge=1, description="blocks retrieved once per question: the early-update range and the pool read from"
    )
    validation_fraction: float = Field(
        0.05, ge=0, lt=1, description="questions held out by hash and answered at each checkpoint to pick the best"
    )
    # Better recall at 5 (docs/measurements.md, "The query tower trained over the whole corpus");
    # None, not True, so that a BM25 run (no query tower) leaves it off, yet refuses it when asked for.
    retriever_corpus_softmax: bool | None = Field(
        None, description="the early update over every block of the index instead of the cached candidates "
        "(the doc vectors are fixed, so scoring the corpus is one matrix product), every block holding an answer a "
        "positive; each step adds as many questions whose answer no candidate holds but some block does, trained "
        "through the query tower alone. Dense only; null (the default): on with a dense index, off with BM25",
    )
    max_question_wordpieces: int = Field(MAX_QUESTION_WORDPIECES, ge=1)

    @model_validator(mode="after")
    def _read_within_candidates(self) -> FinetuneConfig:
        if self.num_read > self.num_candidates:
            raise ValueError(f"need num_read <= num_candidates, got {self.num_read} and {self.num_candidates}")
        return self


class ReaderWarmupConfig(FinetuneConfig):
    """The reader's warm-up before Open-QA fine-tuning, trained by fine-tuning's trainer with its
    loss on the questions of `source`; fine-tuning then starts from the reader and query tower it leaves.
    - `squad` (`realm.model.training.squad_passages`): SQuAD v1.1's human questions (its
      development set, shipped), each read over its own paragraph, cut into a block as the corpus
      is, and the top num_read − 1 blocks the run's index retrieves for it; the gold spans are
      the answers marked in the paragraph and an answer's text in a retrieved block, as
      fine-tuning finds them (the blocks without are the negatives). The paragraph is in no
      index, so the query tower has nothing to score it against: the blocks are scored alike, the
      reader alone learns and the query tower stays as it was. Validation reads held-out SQuAD
      questions over the same blocks (reading-comprehension exact match), never as Open QA.
    - `cloze` (`realm.model.training.cloze_questions`): questions made from the corpus's own
      salient-span sentences, trained as fine-tuning trains, the query tower too.
    """

    source: Literal["squad", "cloze"] = Field(
        "squad", description="squad: SQuAD v1.1 questions over their paragraphs; cloze: the corpus's own sentences"
    )
    questions: int = Field(
        2400, ge=0, description="questions drawn from the source (SQuAD holds 10,570; 0: no warm-up)"
    )
    epochs: float = Field(1.0, ge=0, description="passes over the questions with an answer among their candidates")
    checkpoint_every: int = Field(100, ge=1, description="steps between checkpoints, each validated")
    validation_fraction: float = Field(
        0.04, ge=0, lt=1, description="questions held out by hash and answered at each checkpoint"
    )
