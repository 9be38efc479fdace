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

# Lengths of the CPU presets (design §5b: ~3x cheaper steps than the paper's 96 / 288);
# the `gpu` preset sets the paper's.
CPU_QUERY_WORDPIECES = 64
CPU_BLOCK_WORDPIECES = 128
# Sequences per encoder / doc-tower forward in pre-training. On the CPU, length-sorted groups
# of 16 pad little and keep each forward's activations in cache; a GPU wants fewer, larger
# launches (the `gpu` preset's value is measured in docs/measurements.md, "Five times the pre-training, on a
# rented H100").
CPU_MICRO_BATCH = 16


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

    # 0: publish the sentence-encoder start untrained. Measured (docs/measurements.md): held-out ICT top-1
    # among 512 contexts 0.668, where 300 ICT steps on 2 [CLS]-pooled layers reach 0.105.
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
    # Measured on four seeds from the default start (docs/measurements.md): held-out ICT top-1 0.645 -> 0.809,
    # and after fine-tuning the three dev sets' mean EM higher on every seed.
    tower_scale: float | None = Field(
        20.0, gt=0, description="None: blocks scored by the inner product of the towers' projections (REALM's); "
        "s: by s times their cosine (the sentence encoder was trained with s = 20)",
    )
    projection_sample: int = Field(4096, ge=1, description="contexts whose pooled vectors the PCA projection is fitted on")


class PretrainConfig(RetentionConfig):
    """REALM pre-training: salient-span MLM over the top-k retrieved blocks.

    `learning_rate` 1e-4, BERT's own pre-training rate: the MiniLM warm start ships no MLM
    head, so the head starts from scratch and a few hundred steps at REALM's 3e-5 (for batch
    512 over 200k steps from a trained head) leave it near chance. The head's transform and
    bias learn at `mlm_head_learning_rate`, 10x that: measured with the 6-layer encoder over
    1,000 steps (docs/measurements.md), one rate for all left the loss flat and masked-span accuracy at 0.046
    on held-out salient spans; the head's own rate (with only salient-span sentences, see
    `salient_examples`) reached 0.079 and a falling loss. `cached_doc_embeddings`:
    candidates' vectors come from the index and the doc tower is frozen (design §5b
    "cached", ~1.7x faster steps). `random_spans`: ablation, mask a random span (seeded by
    example id) instead of the salient one. `max_block_wordpieces` < 288 cuts every block's
    body (in the index too) for speed. `retriever_frozen_steps`: neither tower gets a gradient
    before this step. REALM starts from an encoder that already reads (BERT's MLM head); a
    fresh head cannot, so early on r(z) = [p(y|z,x)/p(y|x) − 1] p(z|x) is noise, and that noise
    drives p(z|x) to collapse onto arbitrary blocks (measured: a start that finds the masked
    span in a retrieved block for 21% of held-out examples fell to 4.7% within 200 steps).
    Frozen first, the encoder learns to read against the warm-start retriever before the
    retriever learns from the encoder. When it unfreezes, the towers learn at
    `retriever_learning_rate`, rising from 0 over `retriever_warmup_steps`: measured with the
    6-layer encoder (docs/measurements.md), the query tower trained from step 500 of 1,000 at 3e-5 with a
    100-step warm-up raised span coverage on 4,096 never-trained-on examples from 0.250 to
    0.322 without collapsing p(z|x), where a full-rate unfreeze (2-layer encoder) lost coverage.
    """

    # ~1 step/s on the vital corpus with the `fast` preset and cached candidate vectors (~8 s
    # a step with candidates re-embedded by the doc tower, 56 distinct blocks a step).
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
    # Measured (docs/measurements.md): a retriever trained jointly from the start loses the span coverage of
    # its start within ~200 steps, before the fresh MLM head can read; frozen, it helps.
    cached_doc_embeddings: bool = Field(True, description="candidate vectors from the index, doc tower frozen")
    random_spans: bool = Field(False, description="ablation: mask random spans instead of salient spans")
    # Half the default steps: measured (docs/measurements.md), the 6-layer encoder's head reads by then and
    # the query tower trained from there raised span coverage without collapsing p(z|x).
    retriever_frozen_steps: int = Field(
        500, ge=0, description="no gradient into either retriever tower before this step, while the fresh MLM head learns to read"
    )
    # REALM's own rate; the body's 1e-4 is for the fresh MLM head's sake. 1e-4 here too was
    # measured (docs/measurements.md, "the query tower at the body's rate"): the block holding the span ranked
    # no better, and 35 examples right only with it against 46 only with 3e-5 (p = 0.27).
    retriever_learning_rate: float = Field(3e-5, gt=0, description="peak rate of the retriever towers")
    retriever_warmup_steps: int = Field(
        100, ge=0, description="after retriever_frozen_steps, steps over which the towers' rate rises from 0 to the "
        "schedule's, so fresh AdamW moments do not take full-rate steps"
    )
    refresh_every: int = Field(
        100, ge=1, description="steps between asynchronous index refreshes, each swapped in when the next starts "
        "(none with cached_doc_embeddings)"
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

    # ~6 min an epoch with the 6-layer model on a 2-core CPU (four in 25.5 min, validations
    # included, on an AMD EPYC without AMX): four fit the main job's hour with half of it spare.
    epochs: float = Field(
        4.0, ge=0, description="passes over the training questions that carry a loss (ORQA: 20; 0 publishes the start)"
    )
    batch_size: int = Field(8, ge=1)
    # BERT's fine-tuning range is 2e-5..5e-5 (Devlin et al.); the span MLP and the
    # question-match vector start from scratch (the vector from pre-training's, where that
    # marked the masked sentence's words) and learn at their own, higher rate.
    learning_rate: float = Field(5e-5, gt=0, description="peak rate of the query tower and the reader's BERT")
    span_head_learning_rate: float = Field(
        5e-4, gt=0, description="peak rate of the freshly initialised span MLP and question-match vector"
    )
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="share of the steps the learning rate rises over")
    weight_decay: float = Field(0.01, ge=0)
    reader_dropout: float | None = Field(
        None, ge=0, lt=1, description="hidden-state dropout of the reader while it trains (None: the model preset's)"
    )
    # Measured from one start on this CPU: the three dev sets' mean EM 0.190 against 0.179; its
    # longer horizon since, on two seeds: 0.206 / 0.145 against 0.188 / 0.140 (docs/measurements.md).
    average_weights: bool = Field(
        True, description="validate and publish a moving average of the steps' weights, leaning to the later ones, "
        "instead of the last step's (realm.model.training.weight_average)",
    )
    # Measured on (docs/measurements.md, "The span features' second seed"): the three dev sets' mean EM
    # 0.186 / 0.191 against 0.169 / 0.165 on seeds 0 and 1, 30 / 14 dev questions right only with / without.
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
    # Measured on two seeds (docs/measurements.md, "The query tower trained over the whole corpus"): the answer
    # in the top 5 for 43 dev questions only with it, 17 only without (p = 0.001); exact match
    # level (22 / 22). None, not True, so that a BM25 run (no query tower) leaves it off by
    # default, yet refuses it when asked for.
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
    """The reader's span-selection warm-up: fine-tuning (same trainer, same loss) on cloze
    questions made from the corpus's own salient-span sentences (`realm.model.training.cloze_questions`),
    before fine-tuning on Open-QA questions starts from the reader and query tower it leaves."""

    # Measured on the vital corpus: 45% of the cloze questions have their answer in another
    # block among their top 20 (30% in the top 5), so 6,000 give ~2,650 that train.
    questions: int = Field(6000, ge=0, description="cloze questions drawn from the pre-training sentences (0: no warm-up)")
    # One pass: ~13 min with the 6-layer model on a 2-core CPU, within the main job's hour.
    epochs: float = Field(1.0, ge=0, description="passes over the cloze questions with an answer among their candidates")
    checkpoint_every: int = Field(100, ge=1, description="steps between checkpoints, each validated")
    validation_fraction: float = Field(
        0.02, ge=0, lt=1, description="cloze questions held out by hash and answered at each checkpoint"
    )
