"""Where a run keeps its artifacts: one root (local path) for every stage of the chain. A
contract like the Parquet schemas beside it: it imports nothing above them.

    <root>/documents, blocks, block_entities, pretrain_examples, ict_examples, dead_letter, summary
                                                         (prepare; block_entities/ always lies beside
                                                         the blocks/ it tags, `entities_beside`)
    <root>/checkpoints/{ict,pretrain,warmup,finetune}/<step>/   save_pretrained components + state
    <root>/checkpoints/{warmup,finetune}/best/<step>/    the best validated one
    <root>/checkpoints/<stage>.superseded-<n>/           a stage set aside when its inputs changed
    <root>/snapshots/<step>/doc_embedder                 doc tower snapshots the refresh embeds with
    <root>/pooled_states/<bert>-<length>/0/              the blocks' pooled doc-tower states (doc_tower projection)
    <root>/embeddings/<step>/, <root>/index/<step>/      refreshed doc embeddings and MIPS indexes
    <root>/bm25/<step>/                                  BM25 index over the blocks (BERT-Baseline)
    <root>/predictions/<dataset>.parquet, <root>/reports/ (metrics JSON lines, loss curves)
    <root>/masked_spans/<examples>.parquet               pre-training's last evaluation, per example
    <root>/calibration/calibrator.json                   the answer probability's map, fitted for the
                                                         fine-tuned checkpoint that answers
    <root>/run.json                                      the model preset the run trains, the
                                                         run preset it was started with and the
                                                         BERT directory it starts from (--bert)
    <root>/vocabulary.json                               the WordPiece vocabulary prepare cut the
                                                         blocks and examples with (its sha256)
    <root>/corpora/<name>/{blocks,block_entities,embeddings/<v>,index/<v>,predictions}
                                                         another knowledge corpus, indexed by the
                                                         run's trained doc tower (`realm index`)
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from realm.schemas.calibration import CALIBRATION_DIR
from realm.schemas.io import ArtifactError
from realm.schemas.writer_lock import writer_lock

RUN_FILE = "run.json"
VOCABULARY_FILE = "vocabulary.json"
CORPORA_DIR = "corpora"
# A corpus name becomes a directory name: letters, digits, '.', '_' and '-', not starting with '.'.
_CORPUS_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def entities_beside(blocks_path: str | Path) -> str:
    """The `block_entities/` artifact of a `blocks/` artifact: its sibling, in a run root, in
    `corpora/<name>/` or in any prepared corpus."""
    return str(Path(blocks_path).parent / "block_entities")


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @classmethod
    def at(cls, root: str | Path) -> RunLayout:
        return cls(Path(root).expanduser().resolve())

    def artifact(self, name: str) -> str:
        return str(self.root / name)

    @property
    def blocks(self) -> str:
        return self.artifact("blocks")

    @property
    def block_entities(self) -> str:
        return entities_beside(self.blocks)

    @property
    def pretrain_examples(self) -> str:
        return self.artifact("pretrain_examples")

    @property
    def ict_examples(self) -> str:
        return self.artifact("ict_examples")

    def checkpoints(self, stage: str) -> str:
        return str(self.root / "checkpoints" / stage)

    def training_lock(self) -> AbstractContextManager[None]:
        """One training at a time in this run (`writer_lock` on `checkpoints/`): a second one
        would write its steps among the first's, or set aside the stage the first is writing."""
        return writer_lock(self.root / "checkpoints", "the run's checkpoints")

    @property
    def snapshots(self) -> Path:
        return self.root / "snapshots"

    @property
    def pooled_states(self) -> Path:
        return self.root / "pooled_states"

    @property
    def embeddings(self) -> str:
        return self.artifact("embeddings")

    @property
    def index(self) -> str:
        return self.artifact("index")

    @property
    def bm25(self) -> str:
        return self.artifact("bm25")

    @property
    def predictions(self) -> Path:
        return self.root / "predictions"

    def corpus(self, name: str) -> RunLayout:
        """The layout of another knowledge corpus indexed for this run, `<root>/corpora/<name>/`:
        its own blocks/, block_entities/, embeddings/, index/ and predictions/ (checkpoints stay the run's)."""
        if not _CORPUS_NAME.fullmatch(name):
            raise ValueError(f"corpus name {name!r} must be letters, digits, '.', '_' or '-' (it names a directory)")
        return RunLayout(self.root / CORPORA_DIR / name)

    def corpora(self) -> list[str]:
        """Names of the corpora indexed for this run besides its own (a directory there whose
        name `corpus` refuses, e.g. a file system's `.snapshot`, is none of them)."""
        folder = self.root / CORPORA_DIR
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and _CORPUS_NAME.fullmatch(p.name))

    def predictions_file(self, dataset: str) -> Path:
        """`predictions/<dataset>.parquet`; refused unless it lies inside the run's predictions/
        (a dataset name comes from a question file a user brought)."""
        path = (self.predictions / f"{dataset}.parquet").resolve()
        if path.parent != self.predictions.resolve():
            raise ValueError(f"dataset name {dataset!r} would write {path}, outside {self.predictions}")
        return path

    @property
    def masked_spans(self) -> Path:
        return self.root / "masked_spans"

    @property
    def calibration(self) -> Path:
        return self.root / CALIBRATION_DIR

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    def record_model_preset(
        self, model_preset: str, run_preset: str | None = None, renamed_from: str | None = None, bert_dir: str | None = None,
    ) -> None:
        """Remember the model preset and the BERT directory it starts from (None: the preset's
        own), so `realm ask` and `realm evaluate` rebuild the same model, and the run preset the
        run was started with (the first one recorded stays), so `realm train` goes on with its
        settings; a run root must not mix model presets or BERTs (its checkpoints would not load,
        its blocks' wordpiece ids would mean other words). `renamed_from`: the name the run
        recorded for the same preset before it was renamed, replaced by this one."""
        record = self._record() or {}
        recorded = record.get("model_preset")
        if recorded is not None and recorded not in (model_preset, renamed_from):
            raise ValueError(f"{self.root} was trained with model preset {recorded!r}, not {model_preset!r}")
        if recorded is not None and record.get("bert_dir") != bert_dir:
            raise ValueError(f"{self.root} was made with {bert_text(record.get('bert_dir'))}, not {bert_text(bert_dir)}")
        record["model_preset"] = model_preset
        if bert_dir is not None:
            record["bert_dir"] = bert_dir
        if run_preset is not None:
            record.setdefault("run_preset", run_preset)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / RUN_FILE).write_text(json.dumps(record))

    def model_preset(self) -> str | None:
        record = self._record()
        return None if record is None else record["model_preset"]

    def bert_dir(self) -> str | None:
        """The BERT directory the run starts from (`--bert`); None: its model preset's own."""
        record = self._record()
        return None if record is None else record.get("bert_dir")

    @property
    def vocabulary_file(self) -> Path:
        return self.root / VOCABULARY_FILE

    def prepared_vocabulary(self) -> dict | None:
        """{"sha256", "source"} of the vocabulary the run's blocks and examples were cut with;
        None for a run prepared before prepare recorded it."""
        path = self.vocabulary_file
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            if not isinstance(record["sha256"], str):
                raise TypeError("a sha256 that is not a string")
            return record
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise ArtifactError(f"{path}: not a vocabulary record ({type(error).__name__}: {error})") from None

    def run_preset(self) -> str | None:
        """The run preset the run was started with; None for a run whose record predates it."""
        record = self._record()
        return None if record is None else record.get("run_preset")

    def _record(self) -> dict | None:
        path = self.root / RUN_FILE
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            if not isinstance(record["model_preset"], str) or not isinstance(record.get("run_preset", ""), str):
                raise TypeError("a preset that is not a name")
            if not isinstance(record.get("bert_dir", ""), str):
                raise TypeError("a bert_dir that is not a path")
            return record
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise ArtifactError(
                f"{path}: not a run record ({type(error).__name__}: {error}); "
                'it holds {"model_preset": NAME, "run_preset": NAME, "bert_dir": DIR (optional)}'
            ) from None


def bert_text(bert_dir: str | None) -> str:
    """How a message names the BERT a run starts from."""
    return f"--bert {bert_dir}" if bert_dir else "its model preset's own BERT (no --bert)"
