"""Block wordpieces by block id, for building the inputs of retrieved candidates.

Holds the `title_token_ids`/`body_token_ids` columns of `blocks/` as flat numpy arrays with
offsets (Arrow's list layout), so a 13M-block corpus costs its token ids and not a Python
object per block; ids resolve to rows through a sorted copy of the ids. Loaded `with_text`,
it also keeps the `title` and `text` strings (as Arrow arrays) to show retrieved evidence, and
`with_entities` the named entities of the `block_entities/` artifact beside the blocks (the
reader's entity-type input), checked to cover exactly the same blocks.

Blocks are read in block_id order, whatever shards Beam's workers put them in: the corpus
is embedded in windows of length-sorted batches, and a block's vector depends (in its last
bits) on the padding of the batch it lands in, so a run-dependent order would give
run-dependent vectors, retrievals and losses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from realm.schemas import BLOCK_ENTITIES, BLOCKS, ArtifactError, read_table, validate_table
from realm.schemas.io import naming_damage, open_parquet, parquet_files, read_validated
from realm.schemas.run_layout import entities_beside

# What the doc tower, the encoder and the reader need of a block.
BLOCK_COLUMNS = ["block_id", "title_token_ids", "body_token_ids"]
# What showing a block as evidence, and answering from its text, need besides.
BLOCK_TEXT_COLUMNS = ["title", "text", "sentence_starts"]
# Blocks held at once while putting a corpus in block_id order; a larger corpus is read in
# several passes, one per range of ids (a pass holds ~1 GB of wordpieces at 288 a block).
ORDER_PASS_BLOCKS = 1 << 20


def iter_block_batches(
    blocks_path: str, batch_rows: int = 4096, columns: Sequence[str] = BLOCK_COLUMNS,
    rows: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """`columns` of a `blocks/` artifact (only those, and block_id, are read), validated, as
    record batches in block_id order (see the module docstring); with `rows` (start, stop),
    only the blocks at those positions of that order, read in passes over their ids alone (a
    rank's share of a refresh reads its share of the corpus, not the whole of it)."""
    files = parquet_files(blocks_path)
    read = list(dict.fromkeys(["block_id", *columns]))
    ids = np.sort(np.concatenate([read_validated(file, BLOCKS, ["block_id"])["block_id"].to_numpy() for file in files]))
    start, stop = rows or (0, len(ids))
    lows = ids[start:stop][::ORDER_PASS_BLOCKS]  # [passes]: the smallest id of each pass
    for low, high in zip(lows, [*lows[1:], ids[stop] if stop < len(ids) else None]):
        passed = pa.concat_tables(_blocks_between(files, read, low, high))
        yield from passed.sort_by("block_id").select(list(columns)).to_batches(max_chunksize=batch_rows)


def _blocks_between(files: list[str], columns: list[str], low: int, high: int | None) -> Iterator[pa.Table]:
    """`columns` of the blocks with low <= block_id < high (no upper bound when None), a
    record batch at a time so a pass holds only the blocks in its range."""
    schema = pa.schema([BLOCKS.field(name) for name in columns])
    for file in files:
        with naming_damage(file):  # damage may surface at any batch
            for batch in open_parquet(file).iter_batches(columns=columns):
                table = validate_table(pa.Table.from_batches([batch]), schema, file)
                ids = table["block_id"]
                in_range = pc.greater_equal(ids, low)
                if high is not None:
                    in_range = pc.and_(in_range, pc.less(ids, high))
                yield table.filter(in_range)


def count_blocks(blocks_path: str) -> int:
    """How many blocks a `blocks/` artifact holds, from its files' footers (no rows read)."""
    return sum(open_parquet(file).metadata.num_rows for file in parquet_files(blocks_path))


class _Lists:
    """A list<int32> column as (values, offsets)."""

    def __init__(self, column: pa.ChunkedArray):
        array = column.combine_chunks()
        self.offsets = array.offsets.to_numpy()
        self.values = array.values.to_numpy()

    def row(self, row: int) -> list[int]:
        return self.values[self.offsets[row] : self.offsets[row + 1]].tolist()


class BlockStore:
    """Title and body wordpieces of every block, by block id; title and text strings too when
    the table has them, and named entities when given a BLOCK_ENTITIES table of the same blocks."""

    def __init__(self, blocks: pa.Table, entities: pa.Table | None = None, entities_path: str = "block_entities"):
        self.block_ids = blocks["block_id"].to_numpy()
        self._order = np.argsort(self.block_ids, kind="stable")
        self._sorted_ids = self.block_ids[self._order]
        self._titles = _Lists(blocks["title_token_ids"])
        self._bodies = _Lists(blocks["body_token_ids"])
        has_text = set(BLOCK_TEXT_COLUMNS) <= set(blocks.column_names)
        self._text_columns = {name: blocks[name] for name in BLOCK_TEXT_COLUMNS} if has_text else None
        self._entities = None if entities is None else entities_in_id_order(entities, self._sorted_ids, entities_path)

    @classmethod
    def from_parquet(
        cls, blocks_path: str | Sequence[str], with_text: bool = False, with_entities: bool = False
    ) -> BlockStore:
        """Training needs only the wordpieces; `with_text` also loads `title`, `text` and
        `sentence_starts`, `with_entities` the `block_entities/` artifact beside `blocks_path`
        (a FileNotFoundError naming the command that tags them when it is not there).

        Several paths: their blocks together (the corpus and the passages of reading-comprehension
        questions). A block id that an earlier one holds is that same block (the chunker's ids
        hash the title and the body), so its later copies are left out."""
        paths = [blocks_path] if isinstance(blocks_path, (str, Path)) else list(blocks_path)
        columns = BLOCK_COLUMNS + (BLOCK_TEXT_COLUMNS if with_text else [])
        tables = [pa.Table.from_batches(list(iter_block_batches(str(path), columns=columns))) for path in paths]
        entities_paths = [tagged_entities(path) for path in paths] if with_entities else []
        entities = [read_table(path, BLOCK_ENTITIES) for path in entities_paths]
        for later in range(1, len(tables)):
            held = pa.concat_tables(tables[:later])["block_id"]
            tables[later] = tables[later].filter(pc.invert(pc.is_in(tables[later]["block_id"], held)))
            if entities:
                entities[later] = entities[later].filter(pc.invert(pc.is_in(entities[later]["block_id"], held)))
        blocks = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if not with_entities:
            return cls(blocks)
        return cls(blocks, pa.concat_tables(entities) if len(entities) > 1 else entities[0], ", ".join(entities_paths))

    def __len__(self) -> int:
        return len(self.block_ids)

    def __contains__(self, block_id: int) -> bool:
        position = int(np.searchsorted(self._sorted_ids, block_id))
        return position < len(self._sorted_ids) and self._sorted_ids[position] == block_id

    def _position(self, block_id: int) -> int:
        """The block's place in block_id order; a KeyError when the corpus does not hold it."""
        if block_id not in self:
            raise KeyError(f"block {block_id} is not in the corpus")
        return int(np.searchsorted(self._sorted_ids, block_id))

    def _row(self, block_id: int) -> int:
        return int(self._order[self._position(block_id)])

    def title_ids(self, block_id: int) -> list[int]:
        return self._titles.row(self._row(block_id))

    def body_ids(self, block_id: int) -> list[int]:
        return self._bodies.row(self._row(block_id))

    def title(self, block_id: int) -> str:
        return self._text_value("title", block_id)

    def text(self, block_id: int) -> str:
        return self._text_value("text", block_id)

    def sentence_starts(self, block_id: int) -> list[int]:
        """Character offsets in `text` where each of the block's sentences begins."""
        return self._text_value("sentence_starts", block_id)

    def entities(self, block_id: int) -> list[tuple[int, int, str]]:
        """(start, end, label) of each named entity in the block's `text`, char offsets."""
        if self._entities is None:
            raise ValueError("this BlockStore holds no entities; load it with from_parquet(..., with_entities=True)")
        row = self._entities[self._position(block_id)].as_py()  # rows in block_id order
        return [(entity["start"], entity["end"], entity["label"]) for entity in row]

    def _text_value(self, column: str, block_id: int) -> str | list[int]:
        if self._text_columns is None:
            raise ValueError("this BlockStore holds no title/text; load it with from_parquet(..., with_text=True)")
        return self._text_columns[column][self._row(block_id)].as_py()


def tagged_entities(blocks_path: str | Path) -> str:
    """The `block_entities/` artifact beside `blocks_path`; a FileNotFoundError naming the command
    that tags it when it is not there (a corpus prepared before entity tagging was a stage)."""
    entities_path = entities_beside(blocks_path)
    if not Path(entities_path).exists():
        raise FileNotFoundError(
            f"{entities_path}: no block entities beside {blocks_path} (a corpus prepared before entity tagging was "
            f"a stage); tag them: python -m realm.pipelines.entities --blocks {blocks_path} "
            f"--output {Path(blocks_path).parent}"
        )
    return entities_path


def entities_in_id_order(entities: pa.Table, sorted_ids: np.ndarray, path: str) -> pa.ChunkedArray:
    """The `entities` column of a BLOCK_ENTITIES table, one row per block in block_id order;
    an ArtifactError naming `path` and a block when it tags other blocks than the store holds."""
    entities = entities.sort_by("block_id")
    ids = entities["block_id"].to_numpy()
    if not np.array_equal(ids, sorted_ids):
        missing = np.setdiff1d(sorted_ids, ids)
        extra = np.setdiff1d(ids, sorted_ids)
        which = f"block {missing[0]} has no row" if len(missing) else (
            f"block {extra[0]} is not in the blocks" if len(extra) else "a block has several rows"
        )
        raise ArtifactError(
            f"{path}: {which} ({len(ids)} rows for {len(sorted_ids)} blocks); it tags other blocks: tag them again "
            "with python -m realm.pipelines.entities"
        )
    return entities["entities"]
