"""What answering needs from a trained run root, resolved in one place for `realm ask`,
`realm evaluate`, `realm run`'s closing answer and the HTTP server: the fine-tuned checkpoint
(the best validated one, else the newest unless the run published a weight average there,
`published_checkpoint`), the index that checkpoint was trained against, the
run's blocks, its model preset and the BERT directory it started from. With `corpus`, the blocks and newest index of another
knowledge corpus indexed for the run (`realm index`, `realm.model.qa.other_corpus`) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from realm.model.index.mips import latest_published
from realm.model.publish import published_steps
from realm.model.networks.checkpoint import BEST_DIR, WEIGHT_AVERAGE_EXTRA, best_checkpoint, checkpoint_extra, checkpoint_paths
from realm.schemas.manifest import IntegrityError, verify_step
from realm.schemas.run_layout import RunLayout


@dataclass(frozen=True)
class TrainedRun:
    checkpoint: Path
    index: Path
    blocks: str
    model_preset: str
    bert_dir: str | None = None  # the BERT directory the run starts from (run.json's), None: the preset's

    @classmethod
    def at(
        cls,
        root: str | Path,
        checkpoint: str | Path | None = None,
        index_path: str | Path | None = None,
        model_preset: str | None = None,
        corpus: str | None = None,
    ) -> TrainedRun:
        """The run at `root`; `checkpoint`, `index_path` and `model_preset` (used only when the
        run records none) override what it holds. Raises FileNotFoundError naming what is missing."""
        layout = RunLayout.at(root)
        if not layout.root.is_dir():
            raise FileNotFoundError(f"{layout.root}: no such directory")
        checkpoint = checkpoint or published_checkpoint(layout)
        if checkpoint is None:
            finetune = Path(layout.checkpoints("finetune"))
            newest = finetune if published_steps(finetune) else finetune / BEST_DIR
            if published_steps(newest):
                raise FileNotFoundError(
                    f"{_why_unusable(newest)}; no fine-tuned checkpoint of {layout.root} is intact: restore it, or "
                    "fine-tune again"
                )
            raise FileNotFoundError(f"{layout.root}: not a trained run (no checkpoints/finetune/; fine-tune it first)")
        if corpus is None:
            blocks, index = layout.blocks, index_path or trained_index(layout, checkpoint)
            if index is None:
                raise FileNotFoundError(f"{layout.root}: no published index (index/ or bm25/) for {checkpoint}")
        else:
            other = layout.corpus(corpus)
            blocks, index = other.blocks, index_path or latest_published(other.index)
            if index is None:
                raise FileNotFoundError(
                    f"{layout.root}: no corpus {corpus!r} indexed for this run (realm index --run {root} --corpus DIR --name {corpus})"
                )
        preset = layout.model_preset() or model_preset
        if preset is None:
            raise FileNotFoundError(f"{layout.root}: no run.json naming the model preset the run trained")
        return cls(Path(checkpoint), Path(index), blocks, preset, layout.bert_dir())


def published_checkpoint(layout: RunLayout) -> Path | None:
    """The fine-tuned checkpoint a run answers with: its best validated one (`best/<step>/`),
    else its newest. A FileNotFoundError naming what is wrong with best/ when it is missing or
    damaged and the newest holds a weight average: the run published only that average, and the
    newest's own components are the trained weights, which it never validated."""
    root = Path(layout.checkpoints("finetune"))
    checkpoint = best_checkpoint(root)
    fallback = checkpoint is not None and checkpoint.parent.name != BEST_DIR
    if fallback and WEIGHT_AVERAGE_EXTRA in checkpoint_extra(checkpoint):
        raise FileNotFoundError(
            f"{_why_unusable(root / BEST_DIR)}; this run publishes the moving average of its weights only there (its "
            f"step checkpoints, {checkpoint} the newest, hold the trained weights): restore it, or remove {root} and "
            "fine-tune again"
        )
    return checkpoint


def _why_unusable(root: Path) -> str:
    """What keeps the newest checkpoint under `root` from being read, naming the file."""
    steps = published_steps(root)
    if not steps:
        return f"{root}: no checkpoint"
    try:
        verify_step(steps[-1][1])
    except IntegrityError as problem:
        return str(problem)
    return f"{steps[-1][1]}: incomplete"


def trained_index(layout: RunLayout, checkpoint: str | Path) -> Path | None:
    """The index a fine-tuned checkpoint was trained against, recorded in it relative to it (it
    may live in another run root, as in a reproduction). A recorded index that is there is the
    one returned even when damaged (loading it names the file); one that is gone is a
    FileNotFoundError naming its step and path: never another index in its place, which would
    answer without a word, from vectors the query tower never met. A checkpoint that records
    none (not written by fine-tuning) answers with the run's newest: the dense `index/` when
    the checkpoint has a query tower, `bm25/` else."""
    # Checkpoints written before paths were recorded relative hold an absolute `index_path`.
    recorded = checkpoint_paths(checkpoint).get("index") or checkpoint_extra(checkpoint).get("index_path")
    if recorded is None:
        dense = (Path(checkpoint) / "query_embedder").is_dir()
        return latest_published(layout.index if dense else layout.bm25)
    if not Path(recorded).is_dir():
        raise FileNotFoundError(
            f"{checkpoint} was fine-tuned against the index of step {Path(recorded).name} ({recorded}), "
            "which is not there; restore it, or name the index to answer with"
        )
    return Path(recorded)
