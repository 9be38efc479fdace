"""Typed parameters of every flow: pydantic models, so the Prefect UI renders them as forms.

Defaults are the `default` run preset, the best recipe measured on a 2-core CPU
(docs/measurements.md, "The default run and its levers"): the vital corpus through the chain in
under an hour with the 6-layer MiniLM BERT (model preset `bf16-6l`), retriever towers that
start as the whole sentence encoder, no pre-training steps and no reader warm-up in the main
job (`realm train pretrain|warmup` and `realm reproduce` run those stages at their own
lengths), fine-tuning on the shipped NQ, WebQuestions and CuratedTrec training questions and
evaluation on the demo set and the shipped held-out tenths. `tiny` proves the plumbing, not
the science, in a few minutes with a random 2-layer model. `gpu` is the full-size setting for
a CUDA machine: the paper's lengths, ten times the steps and each pre-training step's joint
sequences in one forward.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from realm.model.networks.presets import ModelPreset
from realm.model.qa.risk_coverage import MIN_CONFIDENCE
from realm.pipelines.corpus_names import CORPORA
from realm.model.training.stage_settings import FinetuneConfig, IctConfig, PretrainConfig, ReaderWarmupConfig

RunPreset = Literal["tiny", "default", "gpu"]


class RunParams(BaseModel):
    output: str = Field("runs/demo", description="run root every artifact is written under")
    model_preset: ModelPreset = Field(
        "bf16-6l", description="realm.model.networks.config preset (see its docstrings for the speed/fidelity trade)"
    )
    device: str | None = Field(None, description="torch device; default CUDA when present, else CPU")
    seed: int = 0
    bert_dir: str | None = Field(
        None, description="Hugging Face BERT directory (save_pretrained) every component starts from and whose "
        "vocabulary cuts the wordpieces; none: the model preset's own. A run keeps one."
    )


class PrepareParams(BaseModel):
    corpus: Literal[CORPORA] = Field("vital", description=" | ".join(CORPORA))
    input: str | None = Field(None, description="path or glob of the corpus files (not for vital)")
    limit: int | None = Field(None, description="read at most this many vital articles")
    beam_args: list[str] = Field(default_factory=list, description="extra Beam flags, e.g. --runner ...")

    @model_validator(mode="after")
    def _input_for_files_only(self) -> PrepareParams:
        # The readers' own checks, made before a flow starts rather than inside its Beam pipeline.
        if self.corpus == "vital" and self.input:
            raise ValueError(f"corpus 'vital' is embedded and reads no input, got input {self.input!r}")
        if self.corpus != "vital" and not self.input:
            raise ValueError(f"corpus {self.corpus!r} needs an input path or glob (--input)")
        if self.corpus != "vital" and self.limit is not None:
            raise ValueError(f"limit applies to the vital corpus only, not to {self.corpus!r}")
        return self


# The ICT stage's flow reads nothing beyond the trainer's settings.
IctParams = IctConfig


# The pre-training stage's flow reads nothing beyond the trainer's settings (its loop is the trainer's).
PretrainParams = PretrainConfig


# The reader warm-up's flow reads nothing beyond the trainer's settings.
ReaderWarmupParams = ReaderWarmupConfig


# Settings that act through the query tower: a BM25 run has none, so they would do nothing there.
DENSE_ONLY_SETTINGS = ("retriever_corpus_softmax",)
# Settings that give the reader modules of its own: a reader saved with one set loads only into the same.
READER_MODULE_SETTINGS = ("span_features",)


class FinetuneParams(FinetuneConfig):
    """The fine-tuning settings (`FinetuneConfig`) plus what the flow reads them from."""

    qa_train: list[str] = Field(
        default_factory=list, description="Open-QA training files; empty: the NQ, WebQuestions and CuratedTrec sets shipped"
    )
    retriever: Literal["dense", "bm25"] = Field(
        "dense", description="dense: the query tower over the pre-trained index; bm25: BM25 over the blocks (BERT-Baseline)"
    )

    @model_validator(mode="after")
    def _dense_settings_need_the_dense_retriever(self) -> FinetuneParams:
        dense_only = [name for name in DENSE_ONLY_SETTINGS if getattr(self, name)]
        if self.retriever == "bm25" and dense_only:
            verb, they = ("needs", "it") if len(dense_only) == 1 else ("need", "they")
            names = " and ".join([", ".join(dense_only[:-1]), dense_only[-1]] if len(dense_only) > 1 else dense_only)
            raise ValueError(f"{names} {verb} retriever 'dense'; with 'bm25' {they} would do nothing")
        return self

    def for_retriever(self, retriever: Literal["dense", "bm25"], **updates) -> tuple[FinetuneParams, list[str]]:
        """These settings with `updates` for a run over `retriever`, validated as a form is, and
        the names of the dense-only settings turned back to their defaults for a BM25 run: one
        set of settings for every row of a comparison, each row taking what applies to it."""
        values = self.model_dump() | updates | {"retriever": retriever}
        dropped = [name for name in DENSE_ONLY_SETTINGS if values[name]] if retriever == "bm25" else []
        values |= {name: type(self).model_fields[name].get_default(call_default_factory=True) for name in dropped}
        return type(self).model_validate(values), dropped


class EvaluateParams(BaseModel):
    qa: list[str] = Field(
        default_factory=list, description="Open-QA files to evaluate; empty: the demo set and the shipped held-out tenths"
    )
    num_read: int = 5
    num_retrieve: int = 20
    min_confidence: float = Field(
        MIN_CONFIDENCE, ge=0.0, le=1.0,
        description="answers below this probability count as not given: the share answered and their exact match",
    )


class PipelineParams(BaseModel):
    run: RunParams = Field(default_factory=RunParams)
    prepare: PrepareParams = Field(default_factory=PrepareParams)
    ict: IctParams = Field(default_factory=IctParams)
    pretrain: PretrainParams = Field(default_factory=PretrainParams)
    warmup: ReaderWarmupParams = Field(default_factory=ReaderWarmupParams)
    finetune: FinetuneParams = Field(default_factory=FinetuneParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)

    @model_validator(mode="after")
    def _warmed_up_reader_fits_fine_tuning(self) -> PipelineParams:
        # Fine-tuning starts from the warm-up's whole reader, loaded as it was saved: refused
        # here, not after the warm-up has run.
        if self.warmup.questions:
            differ = [name for name in READER_MODULE_SETTINGS if getattr(self.warmup, name) != getattr(self.finetune, name)]
            if differ:
                raise ValueError(
                    f"warmup and finetune set {' and '.join(differ)} differently; fine-tuning starts from the "
                    "warm-up's reader, so they must agree (or warmup.questions = 0)"
                )
        return self

    @classmethod
    def preset(cls, name: RunPreset, output: str | None = None) -> PipelineParams:
        params = {"default": _default, "tiny": _tiny, "gpu": _gpu}[name]()
        if output:
            params.run.output = output
        return params


def _default() -> PipelineParams:
    """The main job within an hour on a 2-core CPU: the 6-layer reader beats the 2-layer one that
    pre-training steps would leave time for, and the cloze warm-up did not raise exact match
    (docs/measurements.md, "The default run and its levers"), so neither runs here."""
    return PipelineParams(pretrain=PretrainParams(steps=0), warmup=ReaderWarmupParams(questions=0))


def _tiny() -> PipelineParams:
    return PipelineParams(
        run=RunParams(output="runs/tiny", model_preset="random-2l"),
        prepare=PrepareParams(limit=300),
        # The plumbing of every path: ICT steps, a trained retriever and asynchronous refreshes.
        ict=IctParams(steps=40, batch_size=16, warmup_steps=4, checkpoint_every=20, heldout_examples=64,
                      tower_layers=None, retrieval_pooling="cls", projection_init="random"),
        pretrain=PretrainParams(steps=30, batch_size=4, warmup_steps=3, checkpoint_every=10, refresh_every=10, heldout_examples=32,
                                doc_tower="whole", retriever_frozen_steps=0),
        # Every SQuAD question is read over its own paragraph, so each of the 200 trains.
        warmup=ReaderWarmupParams(questions=200, batch_size=4, checkpoint_every=25),
        finetune=FinetuneParams(epochs=1, batch_size=4, checkpoint_every=25, num_candidates=5),
    )


def _gpu() -> PipelineParams:
    lengths = {"max_query_wordpieces": 96, "max_block_wordpieces": 288}
    return PipelineParams(
        run=RunParams(model_preset="bf16-6l"),
        ict=IctParams(steps=3000, batch_size=128, warmup_steps=300, checkpoint_every=500, **lengths),
        # REALM as the paper trains it: both towers learn (the doc tower through the retrieved
        # candidates) and the index is rebuilt every few hundred steps while training goes on. The
        # towers train in the second half without collapsing p(z|x) (docs/measurements.md,
        # "Retrieval that helps the masked LM").
        pretrain=PretrainParams(steps=3000, batch_size=32, warmup_steps=300, checkpoint_every=250, refresh_every=250,
                                doc_tower="whole", heldout_examples=1024, retriever_frozen_steps=1500,
                                micro_batch=256, **lengths),
        warmup=ReaderWarmupParams(questions=10_570, batch_size=32),  # every SQuAD question
        finetune=FinetuneParams(epochs=10, batch_size=32, checkpoint_every=200),
    )
