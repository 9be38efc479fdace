"""An artifact's rows digested as a multiset: the same rows give the same digest, whatever
files and order hold them.

Beam splits the same rows among shards differently from run to run, so the sha256s of an
artifact's files say whether its bytes changed, not whether its rows did. A prepared
artifact's manifest therefore also records, per file prefix, how many rows its files hold
and the sum of the rows' hashes (`ROWS_KEY`): each row, its schema's columns as sorted JSON,
hashed to 2048 bits with SHAKE-256, the hashes summed modulo 2^2048. Addition is commutative
and associative, so Beam sums in any order and on any worker. The hash is that long because a
sum of short hashes can be matched by another set of rows (Wagner's generalized birthday
attack breaks additive hashes of a few hundred bits).

Every artifact a stage reads (documents, blocks, their entities, pre-training and ICT
examples) is read back in its schema's order (`realm.schemas.io.row_order`, a unique id), so
two such artifacts with the same rows digest give a stage the same data in the same order.
An artifact prepared before rows were recorded stays keyed on its files: preparing a local
run again with the same rows leaves it as it was (`realm.pipelines.staging` hashes its rows
to tell), and with other rows replaces it by one that records them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence

# The manifest's key: {file prefix: {"count": rows, "sum": hex of the hashes' sum}}.
ROWS_KEY = "rows"
ROW_HASH_BYTES = 256
MODULUS = 1 << (8 * ROW_HASH_BYTES)


def row_hash(row: Mapping, columns: Sequence[str]) -> int:
    """The hash of `row`'s `columns` (a column it lacks counts as null)."""
    text = json.dumps({name: row.get(name) for name in columns}, sort_keys=True)
    return int.from_bytes(hashlib.shake_256(text.encode("utf-8")).digest(ROW_HASH_BYTES), "big")


def rows_entry_of(rows: Iterable[Mapping], columns: Sequence[str]) -> dict:
    """The entry of `rows` (their `columns`), hashed and summed in one process."""
    count, total = 0, 0
    for row in rows:
        count, total = count + 1, (total + row_hash(row, columns)) % MODULUS
    return rows_entry(count, total)


def rows_entry(count: int, total: int) -> dict:
    """A prefix's entry under `ROWS_KEY`: its row count and the sum of its rows' hashes."""
    return {"count": count, "sum": format(total % MODULUS, f"0{2 * ROW_HASH_BYTES}x")}


def rows_digest(rows: Mapping[str, Mapping]) -> str:
    """sha256 of all prefixes' rows together: the same for the same rows however they were
    written, by one pipeline or by stages run one at a time under other file prefixes."""
    count = sum(entry["count"] for entry in rows.values())
    total = sum(int(entry["sum"], 16) for entry in rows.values()) % MODULUS
    return hashlib.sha256(json.dumps(rows_entry(count, total), sort_keys=True).encode()).hexdigest()
