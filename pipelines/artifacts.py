"""Reading and writing artifact directories from Beam, always through a `realm.schemas` schema.

`WriteArtifact` writes `<output>/<name>/part-*.parquet`; an empty PCollection still yields a
valid (empty) table, so downstream readers never have to special-case a clean run. Beside the
shards it writes `<file prefix>.rows.json`, the count and hash sum of the rows it wrote
(`realm.schemas.rows_digest`), which the staged artifact's manifest takes in
(`realm.pipelines.staging`).
`ReadArtifact` reads the shards back and validates every file against the schema.
"""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from realm.schemas.dead_letter import DEAD_LETTER
from realm.schemas.io import validate_table
from realm.schemas.rows_digest import MODULUS, row_hash, rows_entry

# `<prefix>.rows.json`: the rows a WriteArtifact wrote under that file prefix.
ROWS_FILE_SUFFIX = ".rows.json"


def artifact_dir(output: str, name: str) -> str:
    return FileSystems.join(output, name)


def artifact_pattern(path: str) -> str:
    """The Parquet files of an artifact directory, or `path` itself when it is a glob."""
    return path if any(c in path for c in "*?[") else FileSystems.join(path, "*.parquet")


class WriteArtifact(beam.PTransform):
    """Write dict records to `<output>/<name>/<file_prefix>-*.parquet` with `schema`."""

    def __init__(
        self, output: str, name: str, schema: pa.Schema, file_prefix: str = "part", num_shards: int = 0
    ):
        super().__init__(label=f"Write{_camel(name)}")
        self.directory = artifact_dir(output, name)
        self.schema = schema
        # Stages run one by one share `dead_letter/`; distinct prefixes keep their shards apart.
        self.file_prefix = file_prefix
        self.num_shards = num_shards

    def expand(self, records):
        # num_shards=0 lets the runner choose; Beam writes one empty shard for an empty input,
        # which keeps "an empty dead-letter table is still written" true without a side path.
        written = records | "Parquet" >> beam.io.WriteToParquet(
            FileSystems.join(self.directory, self.file_prefix),
            self.schema,
            file_name_suffix=".parquet",
            num_shards=self.num_shards,
        )
        # An empty input still gives its entry (count 0): CombineGlobally emits the empty sum.
        (
            records
            | "SumRowHashes" >> beam.CombineGlobally(_SumRowHashes(self.schema.names))
            | "WriteRows" >> beam.Map(_write_rows_file, rows_file(self.directory, self.file_prefix))
        )
        return written


class _SumRowHashes(beam.CombineFn):
    """(row count, sum of the rows' hashes) of a PCollection, as a manifest's rows entry."""

    def __init__(self, columns: list[str]):
        self.columns = list(columns)

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, accumulator: tuple[int, int], row: dict) -> tuple[int, int]:
        count, total = accumulator
        return count + 1, (total + row_hash(row, self.columns)) % MODULUS

    def merge_accumulators(self, accumulators) -> tuple[int, int]:
        count, total = 0, 0
        for more, added in accumulators:
            count, total = count + more, (total + added) % MODULUS
        return count, total

    def extract_output(self, accumulator: tuple[int, int]) -> dict:
        return rows_entry(*accumulator)


def rows_file(directory: str, file_prefix: str) -> str:
    """Where a WriteArtifact into `directory` puts the rows entry of its `file_prefix` shards."""
    return FileSystems.join(directory, file_prefix + ROWS_FILE_SUFFIX)


def _write_rows_file(entry: dict, path: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(entry).encode("utf-8"))


class _ReadValidatedFn(beam.DoFn):
    def __init__(self, schema: pa.Schema):
        self.schema = schema

    def process(self, readable: fileio.ReadableFile):
        with readable.open() as handle:
            table = pq.read_table(handle)
        yield from validate_table(table, self.schema, readable.metadata.path).to_pylist()


class ReadArtifact(beam.PTransform):
    """Read an artifact directory (or a glob of Parquet files) as dicts, validated per file."""

    def __init__(self, path: str, schema: pa.Schema):
        super().__init__(label=f"Read{_camel(os.path.basename(path.rstrip('/')) or 'Artifact')}")
        self.pattern = artifact_pattern(path)
        self.schema = schema

    def expand(self, pbegin):
        # Reshuffling the file list (not the rows) lets each worker read whole shards and run
        # the fused downstream stages on them, without moving the rows through a shuffle.
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self.pattern)
            | "SpreadFiles" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
            | "Validate" >> beam.ParDo(_ReadValidatedFn(self.schema))
        )


def write_stage_outputs(outputs: dict, output: str, stage: str, schemas: dict[str, pa.Schema]) -> None:
    """Write a stage's main outputs by artifact name, and its dead letters as `dead_letter/<stage>-*`."""
    for name, schema in schemas.items():
        outputs[name] | WriteArtifact(output, name, schema)
    outputs["dead_letter"] | WriteArtifact(output, "dead_letter", DEAD_LETTER, file_prefix=stage)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_") if part)
