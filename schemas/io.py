"""Parquet I/O through the artifact schemas: every writer passes one, every reader validates it.

An artifact is a directory of Parquet files (Beam writes shards; `write_table` writes one
file). `read_table` reads all of them and fails with the path and the offending column when
a file does not match the contract, rather than letting a wrong dtype surface deep in training.
Which rows land in which shard, and in what order, is up to Beam's workers and differs from
run to run; an artifact whose schema names a row order (`ordered_by`) is read back sorted by
that stable id, so the same rows always give the same examples, batches and losses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq

from realm.schemas.manifest import MANIFEST_FILE, verify_step


# Beam's shard names: <prefix>-<index>-of-<count>.parquet, both numbers 5 digits or more.
_SHARD_NAME = re.compile(r"(?P<prefix>.+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})\.parquet")
# Schema metadata: the column whose order is the artifact's canonical row order.
ROW_ORDER = b"realm.row_order"
# Field metadata: the date a column joined its artifact's schema. Files written before then
# lack it and read back with the column null, so a schema grows without orphaning old runs.
ADDED_ON = b"realm.added_on"


def shard_prefix(name: str) -> str | None:
    """The prefix of a file named as Beam names shards (`<prefix>-00000-of-00002.parquet`), or None."""
    match = _SHARD_NAME.fullmatch(name)
    return match["prefix"] if match else None


class ArtifactError(ValueError):
    """A file of an artifact that cannot be used as it is; the message names the file."""


class SchemaMismatchError(ArtifactError):
    """A Parquet file does not hold the columns or types its artifact's schema requires."""


class UnreadableArtifactError(ArtifactError):
    """A file of an artifact is not readable Parquet: truncated, overwritten, not Parquet at all."""


def ordered_by(schema: pa.Schema, column: str) -> pa.Schema:
    """`schema`, declaring `column` (a stable id) the order its rows are read back in."""
    if column not in schema.names:
        raise ValueError(f"row order {column!r} is not a column of the schema")
    return schema.with_metadata({ROW_ORDER: column.encode()})


def added_on(field: pa.Field, date: str) -> pa.Field:
    """`field` (nullable), declared added to its schema on `date`: older files may lack it."""
    if not field.nullable:
        raise ValueError(f"column {field.name!r} added on {date} must be nullable: older files read back null")
    return field.with_metadata({ADDED_ON: date.encode()})


def row_order(schema: pa.Schema) -> str | None:
    """The column an artifact's rows are read back sorted by, or None (file order)."""
    return (schema.metadata or {}).get(ROW_ORDER, b"").decode() or None


def validate_table(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """Return `table` cast to `schema`, or raise naming `path` and the first bad column."""
    for field in schema:
        if field.name not in table.column_names:
            raise SchemaMismatchError(f"{path}: missing column {field.name!r} ({field.type})")
        actual = table.schema.field(field.name).type
        if not _compatible(actual, field.type):
            raise SchemaMismatchError(
                f"{path}: column {field.name!r} has type {actual}, expected {field.type}"
            )
        if not field.nullable and table.column(field.name).null_count:
            raise SchemaMismatchError(f"{path}: column {field.name!r} holds nulls but is required")
    return table.select(schema.names).cast(schema)


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    if actual.equals(expected):
        return True
    # Beam/pandas may write large_* or plain list for fixed-size lists; values must still match.
    if pa.types.is_null(actual):
        return True
    for kind in (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean):
        if kind(expected):
            return kind(actual)
    if pa.types.is_string(expected) or pa.types.is_large_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    if _is_list(expected):
        return _is_list(actual) and _compatible(actual.value_type, expected.value_type)
    if pa.types.is_struct(expected):
        if not pa.types.is_struct(actual):
            return False
        names = {actual.field(i).name: actual.field(i).type for i in range(actual.num_fields)}
        return all(
            expected.field(i).name in names
            and _compatible(names[expected.field(i).name], expected.field(i).type)
            for i in range(expected.num_fields)
        )
    return False


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def parquet_files(path: str) -> list[str]:
    """The Parquet files of an artifact: `path` itself, or every *.parquet under the directory,
    which must match its manifest when it has one (`realm prepare` writes one)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such artifact (file or directory)")
    if os.path.isfile(os.path.join(path, MANIFEST_FILE)):
        verify_step(path)
    files = parquet_files_under(path)
    if not files:
        raise FileNotFoundError(f"{path}: directory holds no .parquet files")
    check_shards_complete(files)
    return files


def parquet_files_under(directory: str) -> list[str]:
    """Every *.parquet file under `directory`, sorted, but hidden ones (`.` or `_` first)."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(directory)
        for name in names
        if name.endswith(".parquet") and not name.startswith((".", "_"))
    )


def check_shards_complete(files: list[str]) -> None:
    """`ArtifactError` naming the first missing shard when Beam's `<prefix>-NNNNN-of-MMMMM`
    names show a set of shards incomplete: a lost shard would otherwise read as a smaller
    artifact, without a word."""
    present: dict[tuple[str, int], set[int]] = {}
    for file in files:
        if match := _SHARD_NAME.fullmatch(os.path.basename(file)):
            key = (os.path.join(os.path.dirname(file), match["prefix"]), int(match["count"]))
            present.setdefault(key, set()).add(int(match["index"]))
    for (prefix, count), indexes in sorted(present.items()):
        if missing := sorted(set(range(count)) - indexes):
            raise ArtifactError(
                f"{prefix}-{missing[0]:05d}-of-{count:05d}.parquet: missing ({len(indexes)} of {count} shards there)"
            )


@contextmanager
def naming_damage(file: str) -> Iterator[None]:
    """Turn pyarrow's errors on a damaged file (which name no file) into `UnreadableArtifactError`
    naming `file`; a missing file stays FileNotFoundError."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise UnreadableArtifactError(f"{file}: not readable as Parquet ({error})") from None


def open_parquet(file: str) -> pq.ParquetFile:
    with naming_damage(file):
        return pq.ParquetFile(file)


def read_validated(file: str, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """`columns` of one Parquet file (default: all of `schema`'s), validated against `schema`;
    only those columns are read."""
    wanted = pa.schema([schema.field(name) for name in columns]) if columns else schema
    parquet = open_parquet(file)
    present = set(parquet.schema_arrow.names)
    with naming_damage(file):
        table = parquet.read(columns=[name for name in wanted.names if name in present])
    for field in wanted:
        if field.name not in present and ADDED_ON in (field.metadata or {}):  # written before it was added
            table = table.append_column(field, pa.nulls(len(table), field.type))
    return validate_table(table, wanted, file)  # names the first missing column


def read_table(path: str, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """Read an artifact (file or directory of shards), validated against `schema`, its rows
    sorted by the schema's row order when it names one."""
    order = row_order(schema)
    read = list(dict.fromkeys([*columns, *([order] if order else [])])) if columns else None
    tables = [read_validated(file, schema, read) for file in parquet_files(path)]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if order:
        table = table.sort_by(order)
    return table.select(columns) if columns else table


def write_table(
    path: str, rows: pa.Table | Iterable[Mapping], schema: pa.Schema, *, atomic: bool = True
) -> str:
    """Write `rows` (a Table or dicts) to the Parquet file `path` with `schema`.

    With `atomic`, the file is written under a temporary name and renamed, so a reader never
    opens a half-written artifact.
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=schema)
    table = validate_table(table, schema, path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    target = f"{path}.tmp-{os.getpid()}" if atomic else path
    pq.write_table(table, target)
    if atomic:
        os.replace(target, path)
    return path
