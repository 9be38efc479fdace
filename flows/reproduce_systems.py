"""What each system of the reproduction table (`SYSTEMS`, in the table's order) is built from,
and the parameters that choose which of them `realm-reproduce` trains (`realm.flows.reproduce`)."""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, model_validator

from realm.flows.params import PipelineParams, PretrainParams, RunPreset
from realm.model.analysis.reproduction_table import SYSTEMS, SystemName
from realm.model.training.stage_inputs import json_digest


class SystemSpec(NamedTuple):
    pretrain: str | None  # the pre-training variant its retriever or reader comes from
    retriever: Literal["bm25", "ict", "pretrain"]
    reader: Literal["warm_start", "pretrain"]


SPECS: dict[str, SystemSpec] = {
    "bm25": SystemSpec(None, "bm25", "warm_start"),
    "orqa": SystemSpec(None, "ict", "warm_start"),
    "realm": SystemSpec("realm", "pretrain", "pretrain"),
    "realm_retriever_baseline_encoder": SystemSpec("realm", "pretrain", "warm_start"),
    "baseline_retriever_realm_encoder": SystemSpec("realm", "ict", "pretrain"),
    "random_spans": SystemSpec("random_spans", "pretrain", "pretrain"),
    "stale_index": SystemSpec("stale_index", "pretrain", "pretrain"),
    # The null document alone never trains a tower, so its retriever is ICT's.
    "closed_book": SystemSpec("closed_book", "ict", "pretrain"),
}


def pretrain_variant(variant: str, pretrain: PretrainParams, stale_factor: int) -> PretrainParams:
    """The pre-training settings of a variant that systems read (`SystemSpec.pretrain`)."""
    updates = {
        "realm": {},
        "random_spans": {"random_spans": True},
        "stale_index": {"refresh_every": pretrain.refresh_every * stale_factor},
        "closed_book": {"num_candidates": 1},
    }[variant]
    return pretrain.model_copy(update=updates)


class ReproduceParams(BaseModel):
    output: str = Field("runs/reproduce", description="root of every run the reproduction trains")
    preset: RunPreset = Field(
        "default", description="the run preset sizing every stage: tiny (plumbing), default (a CPU, hours), gpu (full size)"
    )
    qa_train: list[str] = Field(description="Open-QA training files (every dataset is fine-tuned on together)")
    qa_dev: list[str] = Field(default_factory=list, description="Open-QA evaluation files, e.g. nq.dev.jsonl")
    dev_fraction: float = Field(
        0.1, gt=0, lt=1, description="held out of a training dataset that has no evaluation file, by question hash"
    )
    systems: list[SystemName] | None = Field(
        None, description="systems to train (default: every one that the stages can tell apart; see `repeated_systems`)"
    )
    stale_factor: int = Field(30, ge=1, description="stale_index ablation: refresh_every times this")
    seed: int = Field(0, description="seed of the question split, the corpus, ICT, pre-training and the first fine-tuning")
    # One fine-tuning seed cannot order rows this close (docs/measurements.md, "REALM against ORQA on three seeds").
    seeds: int = Field(
        1, ge=1, description="fine-tuning runs per system, with seeds seed, seed + 1, ... from the same starts; the "
        "results pair each system's seeds with the baseline's (realm compare over seeds)",
    )
    device: str | None = None
    stages: PipelineParams | None = Field(None, description="every stage's parameters (default: the run preset's)")

    def effective_stages(self) -> PipelineParams:
        """`stages`, else the run preset's; the `default` preset's main job skips pre-training
        steps, which the REALM rows need, so here they run at the pre-training stage's length."""
        if self.stages is not None:
            return self.stages
        stages = PipelineParams.preset(self.preset)
        if self.preset == "default":
            stages.pretrain = PretrainParams()
        return stages

    def settings_digest(self) -> str:
        """sha256 of what a row's training depends on besides the question split (which
        `split_questions` checks): the stages but for the run root and device, the seed, the
        stale factor. Not `seeds`: each row records its own fine-tuning seed."""
        stages = self.effective_stages().model_dump(mode="json", exclude={"run": {"output", "device"}})
        return json_digest({"stages": stages, "seed": self.seed, "stale_factor": self.stale_factor})

    def repeated_systems(self) -> dict[str, str]:
        """The systems whose training would repeat another row's computation under these
        stages, each with the reason: an ablation that swaps a retriever or stales an index
        changes nothing when pre-training never trains that retriever or never refreshes."""
        pretrain = self.effective_stages().pretrain
        retriever_trains = pretrain.retriever_frozen_steps < pretrain.steps
        repeats = {}
        if not retriever_trains:
            frozen = f"pre-training keeps the retriever frozen for all its steps (retriever_frozen_steps >= steps = {pretrain.steps})"
            repeats["realm_retriever_baseline_encoder"] = f"repeats orqa: {frozen}, so its retriever is ICT's"
            repeats["baseline_retriever_realm_encoder"] = f"repeats realm: {frozen}, so realm's retriever is ICT's"
        if not retriever_trains or pretrain.doc_tower == "frozen":
            repeats["stale_index"] = (
                "repeats realm: the doc tower never trains in pre-training (frozen retriever or "
                "pretrain.doc_tower frozen), so no index is ever refreshed to be stale"
            )
        return repeats

    def left_out_systems(self) -> dict[str, str]:
        """The systems left out of the table because they would repeat another row, each with
        the reason: none where `systems` names the rows (one named that would repeat is refused),
        since the table then says nothing of rows nobody asked for."""
        return {} if self.systems is not None else self.repeated_systems()

    def fine_tuning_seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))

    def effective_systems(self) -> list[str]:
        if self.systems is not None:
            return list(self.systems)
        repeats = self.repeated_systems()
        return [name for name in SYSTEMS if name not in repeats]

    @model_validator(mode="after")
    def _no_repeated_systems(self) -> ReproduceParams:
        repeats = self.repeated_systems()
        for name in self.systems or []:
            if name in repeats:
                raise ValueError(f"system {name} {repeats[name]}; drop it from systems or change the pre-training stage")
        return self
