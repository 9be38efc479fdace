"""Each block wordpiece's named-entity type, a reader input feature (DrQA's NER token feature).

The reader picks spans of the wrong kind from the right block ("five" for the largest ocean,
"Eiffel Tower" for the engineer it is named after): what kind of thing a span names is
evidence a 6-layer reader learns only from the ~1,440 training questions that have an answer
among their blocks. spaCy's NER (the model the salient-span stage runs) tags a block's whole
text the first time the block is read; each body wordpiece inside an entity gets its label's
id (`realm.model.networks.entity_types`) and the reader adds that type's learned vector.
Tagging costs ~10-16 ms a block on the 2-core CPU, once per block and process, and loading
spaCy ~3 s on the first block.
"""

from __future__ import annotations

import functools

from realm.model.index.block_store import BlockStore
from realm.model.networks.entity_types import load_ner, wordpiece_entity_types
from realm.model.networks.reader import body_offsets
from realm.model.tokenization import WordPieceTokenizer


class BlockEntityTypes:
    """Body wordpieces' entity types by block id, tagged on first use and kept."""

    def __init__(self, blocks: BlockStore, tokenizer: WordPieceTokenizer):
        self.blocks = blocks
        self.tokenizer = tokenizer
        self._types: dict[int, list[int]] = {}

    def __call__(self, block_id: int) -> list[int]:
        if block_id not in self._types:
            body, text = self.blocks.body_ids(block_id), self.blocks.text(block_id)
            entities = [(e.start_char, e.end_char, e.label_) for e in _ner()(text).ents]
            self._types[block_id] = wordpiece_entity_types(body_offsets(self.tokenizer, body, text), len(body), entities)
        return self._types[block_id]


@functools.cache
def _ner():
    """Loaded once per process, on the first block tagged (~3 s)."""
    return load_ner()
