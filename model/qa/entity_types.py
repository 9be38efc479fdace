"""Each block wordpiece's named-entity type, a reader input feature (DrQA's NER token feature).

The reader gets wrong spans of the wrong kind from the right block ("five" for the largest
ocean, "Eiffel Tower" for the engineer it is named after): a span's type is evidence the
6-layer reader sees only through 1,440 training questions. spaCy's NER (the model the
salient-span stage runs) tags the block's text; each body wordpiece inside an entity gets
its label's id (1..18), others 0, and the reader adds a learned vector per type.
"""

from __future__ import annotations

import functools

from realm.model.index.block_store import BlockStore
from realm.model.networks.entity_types import wordpiece_entity_types
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
    from realm.pipelines.salient import load_ner

    return load_ner()
