"""`realm-reproduce`: REALM vs ICT-only (ORQA) vs BM25 + reader, with the paper's ablations.

REALM's claim is an ordering (Table 1 and 2 of the paper): pre-training with retrieval makes
both the retriever and the reader better than an ICT-only retriever and a sparse baseline.
This flow trains and evaluates, on one corpus and one set of questions, the systems:

    bm25                              BM25 + reader (the paper's BERT-Baseline)
    orqa                              ICT warm start + fine-tuning
    realm                             ICT -> REALM pre-training + fine-tuning
    realm_retriever_baseline_encoder  REALM's query tower and index, reader from the warm start
    baseline_retriever_realm_encoder  ICT's query tower and index, reader from REALM's encoder
    random_spans                      REALM pre-trained on random instead of salient spans
    stale_index                       REALM pre-trained with an index refreshed `stale_factor`x less often
                                      (x30 of the presets' refresh interval exceeds their step counts:
                                      the index of the ICT towers is then never refreshed while
                                      pre-training; fine-tuning still reads one built at the end)

Layout under `output`: `base/` holds the prepared corpus, the ICT warm start and its index
(`base/index/<ict step>/`); each pre-training variant has a run root of its own (`realm/`,
`random_spans/`, `stale_index/`) and each system one for its fine-tuning and predictions
(`systems/<name>/`), all reading `base/`'s corpus through symbolic links. Every stage is a
cached flow, so a re-run skips what is done and an interrupted one resumes. Results:
`results.parquet` (schema `REPRODUCTION_RESULTS`), `results.md`, `results.png`, and the same
table as a Prefect artifact. `qa/split.json` records a digest of the question split; a re-run
whose split differs (other files, seed or fraction) stops instead of evaluating models trained
on the old one. Wall time per system adds every stage it needs, shared ones
included (the cost of training that system alone); a stage's time is recorded the first time
it completes, so cache hits on a re-run do not count as free.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Literal, NamedTuple

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, model_validator

from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import build_bm25_index, finetune_openqa
from realm.flows.ict_warm_start import ict_warm_start
from realm.schemas.run_layout import RunLayout
from realm.flows.params import EvaluateParams, PipelineParams, PretrainParams, RunParams, RunPreset
from realm.flows.prepare import realm_prepare
from realm.flows.realm_pretrain import realm_pretrain

SystemName = Literal[
    "bm25", "orqa", "realm", "realm_retriever_baseline_encoder", "baseline_retriever_realm_encoder",
    "random_spans", "stale_index",
]
SYSTEMS: tuple[SystemName, ...] = SystemName.__args__
SHARED_ARTIFACTS = ("documents", "blocks", "pretrain_examples", "ict_examples")
ZERO_SHOT_K = 5


class ReproduceParams(BaseModel):
    output: str = Field("runs/reproduce", description="root of every run the reproduction trains")
    size: RunPreset = Field("default", description="stage sizes: tiny (plumbing), default (this CPU, hours), gpu (full size)")
    qa_train: list[str] = Field(description="Open-QA training files (every dataset is fine-tuned on together)")
    qa_dev: list[str] = Field(default_factory=list, description="Open-QA evaluation files, e.g. nq.dev.jsonl")
    dev_fraction: float = Field(
        0.1, gt=0, lt=1, description="held out of a training dataset that has no evaluation file, by question hash"
    )
    systems: list[SystemName] | None = Field(
        None, description="systems to train (default: every one that the stages can tell apart; stale_index needs a "
        "pre-training that refreshes its index, not the default's frozen doc tower)"
    )
    stale_factor: int = Field(30, ge=1, description="stale_index ablation: refresh_every times this")
    seed: int = 0
    device: str | None = None
    stages: PipelineParams | None = Field(None, description="every stage's parameters (default: the `size` preset)")

    def effective_stages(self) -> PipelineParams:
        """`stages`, else the `size` preset; the `default` preset's main job skips pre-training
        steps, which the REALM rows need, so here they run at the pre-training stage's length."""
        if self.stages is not None:
            return self.stages
        stages = PipelineParams.preset(self.size)
        if self.size == "default":
            stages.pretrain = PretrainParams()
        return stages

    def effective_systems(self) -> list[str]:
        if self.systems is not None:
            return list(self.systems)
        refreshes = not self.effective_stages().pretrain.cached_doc_embeddings
        return [name for name in SYSTEMS if refreshes or name != "stale_index"]

    @model_validator(mode="after")
    def _stale_index_needs_refreshes(self) -> ReproduceParams:
        if "stale_index" in self.effective_systems() and self.effective_stages().pretrain.cached_doc_embeddings:
            raise ValueError(
                "stale_index refreshes the index less often, but with pretrain.cached_doc_embeddings the doc tower "
                "is frozen and no index is ever refreshed: it would repeat the realm row. Drop it from systems."
            )
        return self


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
}


def split_questions(params: ReproduceParams, directory: Path) -> tuple[str, list[str]]:
    """Write `train.jsonl` and one `<dataset>.eval.jsonl` per dataset; returns their paths.

    A dataset with an evaluation file in `qa_dev` is evaluated on it; one without gives up
    `dev_fraction` of its training questions, chosen by a hash of the question (stable across
    runs and machines), which are then left out of training."""
    from realm.model.qa.qa_data import hash_chosen, read_qa_file

    train = [e for path in params.qa_train for e in read_qa_file(path)]
    dev = [e for path in params.qa_dev for e in read_qa_file(path)]
    with_dev = {e.dataset for e in dev}


    evaluation = defaultdict(list, {d: [e for e in dev if e.dataset == d] for d in with_dev})
    kept = []
    for example in train:
        if example.dataset not in with_dev and hash_chosen(f"{params.seed}:{example.question}", params.dev_fraction):
            evaluation[example.dataset].append(example)
        else:
            kept.append(example)
    files = {"train.jsonl": kept} | {f"{d}.eval.jsonl": examples for d, examples in sorted(evaluation.items())}
    texts = {name: _questions_jsonl(examples) for name, examples in files.items()}
    digest = hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()
    record = directory / "split.json"
    if record.exists() and json.loads(record.read_text())["sha256"] != digest:
        raise ValueError(
            f"{directory}: the question split differs from the one this reproduction trained on "
            "(other files, seed or dev_fraction); use a new output root"
        )
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (directory / name).write_text(text, encoding="utf-8")
    record.write_text(json.dumps({"sha256": digest, "files": sorted(texts)}, indent=2))
    return str(directory / "train.jsonl"), [str(directory / name) for name in texts if name != "train.jsonl"]


def _questions_jsonl(examples) -> str:
    rows = [
        {"question": e.question, "answers": list(e.answers), "dataset": e.dataset, "answer_type": e.answer_type}
        for e in examples
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


def linked_run(root: Path, base: RunParams) -> RunParams:
    """A run root that reads `base`'s prepared corpus through symbolic links."""
    root.mkdir(parents=True, exist_ok=True)
    for name in SHARED_ARTIFACTS:
        source, link = Path(base.output) / name, root / name
        if source.exists() and not link.exists():
            os.symlink(source.resolve(), link, target_is_directory=True)
    return base.model_copy(update={"output": str(root)})


class StageTimer:
    """Seconds per stage, kept in a JSON file: recorded the first time a stage completes."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}

    @contextlib.contextmanager
    def __call__(self, stage: str):
        started = time.perf_counter()
        yield
        self.seconds.setdefault(stage, time.perf_counter() - started)
        self.path.write_text(json.dumps(self.seconds, indent=2))

    def total(self, stages: list[str]) -> float:
        return sum(self.seconds.get(stage, 0.0) for stage in stages)


@task(name="realm-build-retriever-index", cache_policy=NO_CACHE)
def build_retriever_index(
    output: str, model_preset: str, checkpoint: str, max_block_wordpieces: int, keep: int, device: str | None
) -> str:
    """`<output>/index/<checkpoint step>/`: every block embedded by `checkpoint`'s doc tower
    (built once; an existing publish of that step is reused)."""
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.publish import MANIFEST_FILE
    from realm.model.index.rebuild import rebuild_index

    layout = RunLayout.at(output)
    step = int(Path(checkpoint).name)
    if (Path(layout.index) / str(step) / MANIFEST_FILE).is_file():
        return str(Path(layout.index) / str(step))
    return str(rebuild_index(
        layout.blocks, str(Path(checkpoint) / "doc_embedder"), layout.embeddings, layout.index, step,
        ModelConfig.preset(model_preset), keep, device=select_device(device), max_block_wordpieces=max_block_wordpieces,
    ))


@task(name="realm-zero-shot-recall", cache_policy=NO_CACHE)
def zero_shot_recall(
    output: str, model_preset: str, eval_files: list[str], index_path: str, checkpoint: str | None, device: str | None
) -> dict[str, float]:
    """Recall@5 per dataset of a retriever before fine-tuning: the query tower of `checkpoint`
    over the dense index, or BM25."""
    from realm.model.qa.answering import retrieval_ranks
    from realm.model.index.block_store import BlockStore
    from realm.model.networks.checkpoint import load_components
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.qa.qa_data import read_qa_file
    from realm.model.qa.question_retrieval import load_question_retriever

    config, torch_device = ModelConfig.preset(model_preset), select_device(device)
    query_embedder = load_components(checkpoint, torch_device)["query_embedder"] if checkpoint else None
    retriever = load_question_retriever(index_path, query_embedder, config, torch_device)
    blocks = BlockStore.from_parquet(RunLayout.at(output).blocks, with_text=True)
    tokenizer = config.tokenizer()
    recall = {}
    for path in eval_files:
        examples = read_qa_file(path)
        ranks = retrieval_ranks(retriever, blocks, tokenizer, examples, ZERO_SHOT_K)
        recall[examples[0].dataset] = sum(r is not None for r in ranks) / len(ranks)
    return recall


@flow(name="realm-reproduce")
def realm_reproduce(params: ReproduceParams) -> list[dict]:
    from realm.model.training.train_finetune import WARM_START

    logger = get_run_logger()
    root = Path(params.output).expanduser().resolve()
    stages = params.effective_stages()
    base = stages.run.model_copy(update={"output": str(root / "base"), "seed": params.seed, "device": params.device})
    timer = StageTimer(root / "stage_seconds.json")
    train_file, eval_files = split_questions(params, root / "qa")
    logger.info("fine-tuning on %s; evaluating on %s", train_file, ", ".join(eval_files))

    with timer("prepare"):
        realm_prepare(base, stages.prepare)
    specs = {name: SPECS[name] for name in params.effective_systems()}
    ict = ict_index = None
    if any(spec.retriever != "bm25" for spec in specs.values()):
        with timer("ict"):
            ict = ict_warm_start(base, stages.ict)
        with timer("ict_index"):
            ict_index = build_retriever_index(
                base.output, base.model_preset, ict["checkpoint"], stages.pretrain.max_block_wordpieces,
                stages.pretrain.keep_checkpoints, base.device,
            )

    pretrain_updates = {
        "realm": {},
        "random_spans": {"random_spans": True},
        "stale_index": {"refresh_every": stages.pretrain.refresh_every * params.stale_factor},
    }
    pretrained: dict[str, dict] = {}

    def pretrain(variant: str) -> dict:
        """Pre-train `variant` the first time a system needs it."""
        if variant not in pretrained:
            with timer(f"pretrain_{variant}"):
                pretrained[variant] = realm_pretrain(
                    linked_run(root / variant, base), stages.pretrain.model_copy(update=pretrain_updates[variant]),
                    init_retriever=ict["checkpoint"],
                )
        return pretrained[variant]

    # System by system, publishing the table after each, so a long run shows its rows as they come.
    rows = []
    for name, spec in specs.items():
        run = linked_run(root / "systems" / name, base)
        source = pretrain(spec.pretrain) if spec.pretrain else None
        needed = ["prepare"] + ([] if spec.retriever == "bm25" else ["ict"])
        needed += [f"pretrain_{spec.pretrain}"] if spec.pretrain else []
        if spec.retriever == "bm25":
            with timer(f"bm25_index_{name}"):
                query_checkpoint, index_path = None, build_bm25_index(run.output)
            needed.append(f"bm25_index_{name}")
        elif spec.retriever == "ict":
            query_checkpoint, index_path = ict["checkpoint"], ict_index
            needed.append("ict_index")
        else:
            query_checkpoint, index_path = source["checkpoint"], source["index"]
        reader_init = source["checkpoint"] if spec.reader == "pretrain" else WARM_START
        zero_shot = zero_shot_recall(run.output, run.model_preset, eval_files, index_path, query_checkpoint, run.device)

        finetune_params = stages.finetune.model_copy(
            update={"qa_train": [train_file], "retriever": "bm25" if spec.retriever == "bm25" else "dense"}
        )
        with timer(f"finetune_{name}"):
            finetuned = finetune_openqa(run, finetune_params, init_checkpoint=query_checkpoint,
                                        index_path=index_path, reader_init=reader_init)
        metrics = evaluate(run, EvaluateParams(qa=eval_files), checkpoint=finetuned["checkpoint"], index_path=index_path)
        seconds = timer.total(needed + [f"finetune_{name}"])
        for dataset, m in metrics.items():
            rows.append({
                "system": name, "dataset": dataset, "n": m["n"], "exact_match": m["em"],
                "reader_accuracy": m["reader_accuracy"], "recall_at_5": m["recall_at_5"],
                "zero_shot_recall_at_5": zero_shot[dataset], "train_seconds": seconds, "seed": params.seed,
            })
        logger.info("%s: %s", name, ", ".join(f"{d} EM {m['em']:.3f}" for d, m in metrics.items()))
        publish_results(rows, root)
    return rows


def publish_results(rows: list[dict], root: Path) -> None:
    """results.parquet, results.md, results.png under `root`, and the table as artifacts."""
    from realm.schemas import REPRODUCTION_RESULTS, write_table

    write_table(str(root / "results.parquet"), rows, REPRODUCTION_RESULTS)
    markdown = results_markdown(rows)
    (root / "results.md").write_text(markdown + "\n", encoding="utf-8")
    _plot(rows, root / "results.png")
    create_table_artifact(key="realm-reproduce-results", table=rows, description="REALM vs ORQA vs BM25, per dataset")
    create_markdown_artifact(key="realm-reproduce-table", markdown=markdown, description="the reproduction table")


def results_markdown(rows: list[dict]) -> str:
    """One line per system: EM, reader accuracy and recall@5 per dataset, zero-shot recall@5,
    wall time, seed."""
    datasets = sorted({r["dataset"] for r in rows})
    by_system: dict[str, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        by_system[row["system"]][row["dataset"]] = row
    header = ["system"] + [f"{d} EM" for d in datasets] + [f"{d} reader acc." for d in datasets]
    header += [f"{d} R@5" for d in datasets]
    header += [f"{d} zero-shot R@5" for d in datasets] + ["train time", "seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for system, cells in by_system.items():
        first = next(iter(cells.values()))
        values = [system]
        for key in ("exact_match", "reader_accuracy", "recall_at_5", "zero_shot_recall_at_5"):
            values += [_cell(cells.get(d, {}).get(key)) for d in datasets]
        values += [f"{first['train_seconds'] / 60:.0f} min", str(first["seed"])]
        lines.append("| " + " | ".join(values) + " |")
    counts = ", ".join(f"{d}: {next(r['n'] for r in rows if r['dataset'] == d)} questions" for d in datasets)
    return "\n".join(lines) + f"\n\n{counts}."


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    systems = list(dict.fromkeys(r["system"] for r in rows))
    datasets = sorted({r["dataset"] for r in rows})
    value = {(r["system"], r["dataset"]): r["exact_match"] for r in rows}
    width = 0.8 / max(len(datasets), 1)
    figure, axis = pyplot.subplots(figsize=(max(6, 1.3 * len(systems)), 3.6))
    for offset, dataset in enumerate(datasets):
        axis.bar([i + offset * width for i in range(len(systems))],
                 [value.get((s, dataset), 0.0) for s in systems], width, label=dataset)
    axis.set_xticks([i + width * (len(datasets) - 1) / 2 for i in range(len(systems))])
    axis.set_xticklabels(systems, rotation=25, ha="right", fontsize=8)
    axis.set_ylabel("exact match")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
