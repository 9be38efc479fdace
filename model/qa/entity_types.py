"""Each block wordpiece's named-entity type, a reader input feature (DrQA's NER token feature).

The reader picks spans of the wrong kind from the right block ("five" for the largest ocean,
"Eiffel Tower" for the engineer it is named after): what kind of thing a span names is
evidence a reader learns only slowly from the few training questions that have an answer
among their blocks. The corpus's entities are found once, in Beam (`realm.pipelines.entities`,
`block_entities/`); here each body wordpiece inside one gets its label's id
(`realm.model.networks.entity_types`), the first time its block is read, and the reader adds
that type's learned vector.
"""

from __future__ import annotations

import functools

from realm.model.index.block_store import BlockStore
from realm.model.networks.entity_types import wordpiece_entity_types
from realm.model.networks.reader import body_offsets
from realm.model.tokenization import WordPieceTokenizer


# Blocks whose types are kept: every block of the vital corpus (~13k) many times over, so
# training maps each once; a server over a Wikipedia-sized corpus (`realm index`) keeps the
# most recently read (~2 KB each) instead of every block it ever read.
MAX_CACHED_BLOCKS = 100_000


class BlockEntityTypes:
    """Body wordpieces' entity types by block id, mapped on first use and kept for the
    `max_blocks` most recently read (thread-safe: the HTTP workers share one). `blocks` must
    hold text and entities (`BlockStore.from_parquet(path, with_text=True, with_entities=True)`)."""

    def __init__(self, blocks: BlockStore, tokenizer: WordPieceTokenizer, max_blocks: int = MAX_CACHED_BLOCKS):
        self.blocks = blocks
        self.tokenizer = tokenizer
        self._cached = functools.lru_cache(maxsize=max_blocks)(self._types)

    def __call__(self, block_id: int) -> list[int]:
        return self._cached(block_id)

    def _types(self, block_id: int) -> list[int]:
        body, text = self.blocks.body_ids(block_id), self.blocks.text(block_id)
        offsets = body_offsets(self.tokenizer, body, text)
        return wordpiece_entity_types(offsets, len(body), self.blocks.entities(block_id))
