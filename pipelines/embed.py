"""Embedding a run's corpus as a Beam pipeline: every block of `<run>/blocks/` through the doc
tower of one of its snapshots, with Beam's `RunInference` (`realm.pipelines.embed_handler`).

    python -m realm.pipelines.embed --run RUN [--step STEP] --output DIR \\
        [--max_block_wordpieces N] [--embed_batch_blocks 64] [--embed_window_blocks 4096] [Beam flags]

The doc tower is `<run>/snapshots/<STEP>/` (default: the newest), loaded once per worker
process. Blocks are cut to `--max_block_wordpieces` (the trainer's, as a refresh cuts them),
spread over the workers, gathered into windows that are embedded in length-sorted batches: the
in-process embedder's code on each window, so the vectors are its vectors. Writes under
`--output`: `embeddings/` (the EMBEDDINGS schema, `checkpoint_step` = STEP), `dead_letter/`
(a block holding a wordpiece id outside the tower's vocabulary, `embed_token_id_out_of_vocabulary`;
every block of a window whose forward failed, `embed_inference_failed`), `lineage.json` (what an
index over these embeddings records: `realm.model.index.lineage`) and `summary/embed.json`,
built aside and swapped in once the pipeline has succeeded (`realm.pipelines.staging`).

Pre-training's refresh runs it instead of the in-process embedder with the setting
`refresh_embedder: pipeline` (`embed_into`).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import PredictionResult, RunInference
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from realm.model.index import EMBED_BATCH_BLOCKS, EMBED_WINDOW_BLOCKS
from realm.model.index.lineage import WEIGHTS_FILE, index_lineage
from realm.pipelines.artifacts import ReadArtifact, WriteArtifact, artifact_pattern
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.embed_handler import EMBED_BLOCK, DocTowerHandler
from realm.pipelines.execution import (
    execute, print_summary, require_matches, summary_file, with_local_defaults, write_json, write_summary,
)
from realm.pipelines.options import RealmOptions, require
from realm.pipelines.progress import runs_locally
from realm.pipelines.staging import move_into_place, staged_output, write_manifests
from realm.schemas import BLOCKS, EMBEDDINGS
from realm.schemas.dead_letter import DEAD_LETTER as DEAD_LETTER_SCHEMA
from realm.schemas.dead_letter import dead_letter_record
from realm.schemas.manifest import MANIFEST_FILE, stream_sha256
from realm.schemas.run_layout import RUN_FILE

NAME = STAGE = "embed"
LINEAGE_FILE = "lineage.json"
OUTPUT_SCHEMAS = {"embeddings": EMBEDDINGS, "dead_letter": DEAD_LETTER_SCHEMA}


def block_problem(block: dict, vocab_size: int) -> tuple[str, str] | None:
    """(reason, detail) why `block` cannot be embedded, or None: a wordpiece id outside the doc
    tower's vocabulary would fail the lookup of its whole window."""
    for column in ("title_token_ids", "body_token_ids"):
        if (bad := next((i for i in block[column] if not 0 <= i < vocab_size), None)) is not None:
            return "token_id_out_of_vocabulary", f"{column} holds {bad}; the doc tower's vocabulary has {vocab_size} ids"
    return None


def embeddings_record(result: PredictionResult, step: int) -> dict:
    """The EMBEDDINGS row of one block's `RunInference` result."""
    return {"block_id": result.example, "embedding": result.inference.tolist(), "checkpoint_step": step}


def failed_window_letters(failed: tuple) -> Iterator[dict]:
    """A DEAD_LETTER row per block of a window whose forward raised (`RunInference`'s dead
    letter: the window, and the exception's type, repr and traceback)."""
    window, (_, error, _) = failed
    for block in window:
        record = dead_letter_record(STAGE, block["block_id"], "inference_failed", error)
        counter(STAGE, record["reason"]).inc()
        yield record


class CheckBlocksFn(beam.DoFn):
    """Blocks the tower can embed, cut down to the columns it reads; the others dead-lettered."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.blocks = counter(STAGE, "blocks")

    def process(self, block: dict) -> Iterator:
        if problem := block_problem(block, self.vocab_size):
            yield reject(STAGE, block["block_id"], *problem, raw=block["title"])
            return
        self.blocks.inc()
        yield {name: block[name] for name in EMBED_BLOCK.names}


class EmbedBlocks(beam.PTransform):
    """blocks -> {"embeddings": EMBEDDINGS records of checkpoint step `step`, "dead_letter": ...}."""

    def __init__(self, handler: DocTowerHandler, vocab_size: int, step: int):
        super().__init__()
        self.handler, self.vocab_size, self.step = handler, vocab_size, step

    def expand(self, blocks):
        checked = blocks | "Check" >> beam.ParDo(CheckBlocksFn(self.vocab_size)).with_outputs(DEAD_LETTER, main="blocks")
        # Blocks arrive a Parquet file per worker: spread them so every worker's tower has a share.
        embedded, failed = (
            checked["blocks"]
            | "SpreadBlocks" >> beam.Reshuffle()
            | "DocTower" >> RunInference(self.handler).with_exception_handling()
        )
        embeddings = embedded | "ToRows" >> beam.Map(embeddings_record, self.step)
        failed_letters = failed.failed_inferences | "FailedWindows" >> beam.FlatMap(failed_window_letters)
        dead_letter = (checked[DEAD_LETTER], failed_letters) | "FlattenDeadLetters" >> beam.Flatten()
        return {"embeddings": embeddings, "dead_letter": dead_letter}


def snapshot_dir(run: str, step: int) -> str:
    return FileSystems.join(run, "snapshots", str(step))


def newest_snapshot_step(run: str) -> int:
    """The step of the newest published doc-tower snapshot of `run` (one with its manifest)."""
    matched = FileSystems.match([FileSystems.join(run, "snapshots", "*", MANIFEST_FILE)])[0].metadata_list
    steps = [int(name) for m in matched if (name := m.path.rstrip("/").split("/")[-2]).isdigit()]
    if not steps:
        raise FileNotFoundError(f"--run {run}: no published doc-tower snapshot under {snapshot_dir(run, 0)[:-2]}")
    return max(steps)


def _read_json(path: str) -> dict:
    with FileSystems.open(path) as handle:
        return json.loads(handle.read())


def worker_torch_threads(argv: list[str]) -> int | None:
    """Threads per worker's torch on a local runner: the cores shared by its worker processes
    (None elsewhere: a Dataflow worker runs the SDK processes its machine type decides)."""
    options = PipelineOptions(with_local_defaults(argv))
    if not runs_locally(options):
        return None
    workers = options.view_as(DirectOptions).direct_num_workers or os.cpu_count() or 1
    return max(1, len(os.sched_getaffinity(0)) // workers)


def doc_tower_handler(run: str, doc_tower_dir: str, options: RealmOptions, torch_threads: int | None) -> DocTowerHandler:
    """The handler of the doc tower in `doc_tower_dir`, holding the tokenizer and autocast of
    `run`'s model preset and BERT (run.json's), read here: the BERT's directory is a path on the
    machine that started the run, which a Dataflow worker does not have."""
    from realm.model.networks.config import ModelConfig  # torch: on launching, not on importing

    record = _read_json(FileSystems.join(run, RUN_FILE))
    config = ModelConfig.preset(record["model_preset"], bert_dir=record.get("bert_dir"))
    return DocTowerHandler(
        doc_tower_dir, config.tokenizer(), config.cpu_bf16_autocast, options.max_block_wordpieces,
        options.embed_batch_blocks or EMBED_BATCH_BLOCKS, options.embed_window_blocks or EMBED_WINDOW_BLOCKS,
        torch_threads,
    )


def write_lineage(output: str, doc_tower_dir: str, step: int, max_block_wordpieces: int) -> None:
    """`<output>/lineage.json`: the lineage an index over `<output>/embeddings/` records."""
    files = FileSystems.match([FileSystems.join(output, "embeddings", "*.parquet")])[0].metadata_list
    ids = [pq.read_table(FileSystems.open(m.path), columns=["block_id"])["block_id"] for m in files]
    with FileSystems.open(FileSystems.join(doc_tower_dir, WEIGHTS_FILE)) as weights:
        doc_tower = {"step": step, "sha256": stream_sha256(weights)}
    block_ids = pa.chunked_array([chunk for column in ids for chunk in column.chunks], pa.int64()).to_numpy()
    lineage = index_lineage(doc_tower, block_ids, max_block_wordpieces)
    write_json(FileSystems.join(output, LINEAGE_FILE), lineage)


def run(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    argv = sys.argv[1:] if argv is None else argv
    options = PipelineOptions(argv).view_as(RealmOptions)
    require(options, "run", "output")
    blocks = FileSystems.join(options.run, "blocks")
    require_matches([("--run", options.run, artifact_pattern(blocks))], options.output)
    step = newest_snapshot_step(options.run) if options.step is None else options.step
    doc_tower_dir = snapshot_dir(options.run, step)
    require_matches([("--step", str(step), FileSystems.join(doc_tower_dir, WEIGHTS_FILE))], options.output)
    handler = doc_tower_handler(options.run, doc_tower_dir, options, worker_torch_threads(argv))
    vocab_size = _read_json(FileSystems.join(doc_tower_dir, "config.json"))["vocab_size"]

    def build(pipeline, taps):
        embedded = taps.entering(STAGE, pipeline | ReadArtifact(blocks, BLOCKS)) | EmbedBlocks(handler, vocab_size, step)
        taps.leaving(STAGE, embedded)
        for name, schema in OUTPUT_SCHEMAS.items():
            embedded[name] | WriteArtifact(staging, name, schema, file_prefix=NAME)

    with staged_output(options.output, NAME) as staging:
        counts = execute(build, argv, NAME, [STAGE])
        write_summary(staging, NAME, counts)
        write_lineage(staging, doc_tower_dir, step, options.max_block_wordpieces)
        write_manifests(staging, list(OUTPUT_SCHEMAS))
        kept = move_into_place(staging, options.output, OUTPUT_SCHEMAS, [summary_file(NAME), LINEAGE_FILE])
    print_summary(options.output, NAME, counts, [STAGE], kept)
    return counts


def embed_into(directory: str, run_root: str, step: int, max_block_wordpieces: int) -> None:
    """Write the EMBEDDINGS parts of `run_root`'s blocks, embedded by its snapshot `step`, into
    `directory` (a refresh's staging directory), running this pipeline in a child process: it
    takes over its process's temp folder, and a refresh runs beside training. A dead-lettered
    block fails the refresh (an index without it would never retrieve it, without a word); its
    dead letters stay in `<directory>/.pipeline/`."""
    output = os.path.join(directory, ".pipeline")
    subprocess.run(
        [sys.executable, "-m", "realm.pipelines.embed", f"--run={run_root}", f"--step={step}", f"--output={output}",
         f"--max_block_wordpieces={max_block_wordpieces}"],
        check=True,
    )
    with open(os.path.join(output, summary_file(NAME))) as handle:
        rejected = {reason: n for reason, n in json.load(handle).get(STAGE, {}).items() if reason.startswith(STAGE + "_")}
    if rejected:
        raise ValueError(f"{run_root}: blocks the doc tower of step {step} cannot embed ({rejected}); see {output}/dead_letter")
    for name in os.listdir(os.path.join(output, "embeddings")):
        if name.endswith(".parquet"):
            os.replace(os.path.join(output, "embeddings", name), os.path.join(directory, name))
    shutil.rmtree(output)


if __name__ == "__main__":
    run()
    # The process ends here (a refresh waits on it): what it holds, torch and transformers
    # included, is not worth a collection, which takes about a second at exit.
    gc.freeze()
