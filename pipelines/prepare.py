"""Corpus preparation end to end, as one Beam pipeline: read -> chunk -> tag -> filter, and ICT.

    realm prepare --corpus vital --output runs/vital
    python -m realm.pipelines.prepare --corpus wikipedia-xml --input 'dumps/*.xml.bz2' --output DIR \\
        [--knowledge_blocks OTHER_RUN/blocks] [Beam flags, e.g. --runner DataflowRunner ...]

Writes `documents/`, `blocks/`, `block_entities/`, `pretrain_examples/` (with
`forbidden_block_ids`), `ict_examples/` and `dead_letter/` (always, even when empty) under
`--output`, and `vocabulary.json`, the sha256 of the WordPiece vocabulary (`--model_dir`'s, a
BERT directory; default MiniLM's) that cut them, which training checks its BERT against, showing each stage's counts so far on stderr while it runs
(`realm.pipelines.progress`), then prints the per-stage counts. Without `--knowledge_blocks`,
the knowledge corpus Z is the blocks built here (X = Z, as in Wikipedia pre-training); with
it, e.g. CC-News examples are filtered against a Wikipedia corpus built by an earlier run
(X != Z).

Nothing of a prepared run is lost to a failed prepare: the inputs are checked first (an
`--input` or `--knowledge_blocks` that names no file stops it with one line naming it), an
input whose every record is dead-lettered replaces nothing (`EmptyCorpusError`), the
artifacts and summary are built in a staging directory inside `--output` and replace the
run's only once the pipeline has succeeded (`realm.pipelines.staging`), which also makes
inputs inside the run (its own `documents/` or `blocks/`) safe to read.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from realm.pipelines.artifacts import ReadArtifact, WriteArtifact, artifact_pattern
from realm.pipelines.chunk import ChunkDocuments
from realm.pipelines.entities import TagBlockEntities
from realm.pipelines.execution import (
    execute, print_summary, require_matches, summary_file, write_json, write_summary,
)
from realm.pipelines.ict import BuildIctExamples
from realm.pipelines.options import RealmOptions, require
from realm.pipelines.progress import StageTaps
from realm.pipelines.read_documents import check_parquet_files
from realm.pipelines.readers import read_corpus
from realm.pipelines.salient import TagSalientSpans
from realm.pipelines.staging import move_into_place, staged_output, write_manifests
from realm.pipelines.trivial import FilterTrivialRetrievals
from realm.model.tokenization import load_tokenizer
from realm.schemas import BLOCKS, PREPARED_ARTIFACTS, ArtifactError
from realm.schemas.run_layout import VOCABULARY_FILE

NAME = "prepare"
STAGES = ["read", "chunk", "entities", "salient", "trivial", "ict"]
OUTPUT_SCHEMAS = PREPARED_ARTIFACTS


def build_prepare_pipeline(pipeline: beam.Pipeline, options: RealmOptions, output: str, taps: StageTaps) -> None:
    """The whole preparation, its artifacts written under `output`, each stage counted by `taps`."""
    read = read_corpus(pipeline, options.corpus, options.input, limit=options.limit)
    documents = read["documents"]
    chunked = taps.entering("chunk", documents) | ChunkDocuments(options.model_dir, options.max_block_wordpieces)
    blocks = chunked["blocks"]
    entities = taps.entering("entities", blocks) | TagBlockEntities()
    tagged = taps.entering("salient", blocks) | TagSalientSpans(options.model_dir, options.seed)
    knowledge_blocks = (
        pipeline | "ReadKnowledgeBlocks" >> ReadArtifact(options.knowledge_blocks, BLOCKS)
        if options.knowledge_blocks
        else blocks
    )
    filtered = {
        "pretrain_examples": taps.entering("trivial", tagged["pretrain_examples"]),
        "knowledge_blocks": knowledge_blocks,
    } | FilterTrivialRetrievals(options.max_blocks_per_sentence)
    ict = taps.entering("ict", blocks) | BuildIctExamples(
        options.model_dir, options.seed, options.ict_keep_probability, options.ict_queries_per_block
    )
    stages = {"read": read, "chunk": chunked, "entities": entities, "salient": tagged, "trivial": filtered, "ict": ict}
    for stage, stage_outputs in stages.items():
        taps.leaving(stage, stage_outputs)
    outputs = {
        "documents": documents,
        "blocks": blocks,
        "block_entities": entities["block_entities"],
        "pretrain_examples": filtered["pretrain_examples"],
        "ict_examples": ict["ict_examples"],
        "dead_letter": [stage_outputs["dead_letter"] for stage_outputs in stages.values()] | "FlattenDeadLetters" >> beam.Flatten(),
    }
    for name, schema in OUTPUT_SCHEMAS.items():
        outputs[name] | WriteArtifact(output, name, schema, file_prefix=NAME)


def check_inputs(options: RealmOptions) -> None:
    """FileNotFoundError naming the flag and its value when an input matches no file; an
    ArtifactError naming a documents Parquet file that is not one or lacks a column."""
    inputs = [("--input", options.input, options.input)]
    if options.knowledge_blocks:
        inputs.append(("--knowledge_blocks", options.knowledge_blocks, artifact_pattern(options.knowledge_blocks)))
    require_matches(inputs, options.output)
    if options.corpus == "documents" and options.input:
        check_parquet_files(options.input)


class EmptyCorpusError(ArtifactError):
    """A prepare whose every record was dead-lettered: replacing the run would leave it empty."""


def refuse_empty_corpus(options: RealmOptions, counts: dict[str, dict[str, int]]) -> None:
    """EmptyCorpusError naming the input and why its records were rejected, when no block was
    built: the run keeps what it held (a corpus of nothing would train nothing)."""
    if counts.get("chunk", {}).get("blocks", 0):
        return
    rejected = ", ".join(f"{reason} {count}" for reason, count in counts.get("read", {}).items()) or "none"
    raise EmptyCorpusError(
        f"{options.input or options.corpus}: no block was built (records rejected on reading: {rejected}); "
        f"{options.output} is unchanged"
    )


def write_vocabulary(output: str, model_dir: str | None) -> None:
    """`<output>/vocabulary.json`: the sha256 of the vocabulary the wordpiece ids were cut with,
    and the directory it came from (`RunLayout.prepared_vocabulary` reads it)."""
    tokenizer = load_tokenizer(model_dir)
    record = {"sha256": tokenizer.vocabulary_sha256, "source": str(tokenizer.model_dir)}
    write_json(FileSystems.join(output, VOCABULARY_FILE), record)


def run(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    argv = sys.argv[1:] if argv is None else argv
    options = PipelineOptions(argv).view_as(RealmOptions)
    require(options, "corpus", "output")
    check_inputs(options)
    load_tokenizer(options.model_dir)  # a directory without a vocabulary stops prepare before Beam starts
    with staged_output(options.output, NAME) as staging:
        counts = execute(
            lambda pipeline, taps: build_prepare_pipeline(pipeline, options, staging, taps), argv, NAME, STAGES
        )
        refuse_empty_corpus(options, counts)
        write_summary(staging, NAME, counts)
        write_vocabulary(staging, options.model_dir)
        write_manifests(staging, list(OUTPUT_SCHEMAS))
        kept = move_into_place(staging, options.output, OUTPUT_SCHEMAS, [summary_file(NAME), VOCABULARY_FILE])
    print_summary(options.output, NAME, counts, STAGES, kept)
    return counts


if __name__ == "__main__":
    run()
