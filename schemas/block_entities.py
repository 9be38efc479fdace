"""`block_entities/`: the named entities spaCy finds in each block's text, one row per block.

The reader adds a learned vector per entity type to each body wordpiece inside an entity
(DrQA's NER token feature, `realm.model.networks.entity_types`); tagging the corpus once here,
in Beam, keeps spaCy out of training's and serving's processes. `start`/`end` are char offsets
into the block's `text` (end-exclusive); `label` is spaCy's OntoNotes label. Every block of
the `blocks/` beside it has a row, an empty list when it names no entity.
"""

import pyarrow as pa

from realm.schemas.io import ordered_by

ENTITY = pa.struct(
    [
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
    ]
)

BLOCK_ENTITIES = ordered_by(pa.schema(
    [
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("entities", pa.list_(ENTITY), nullable=False),
    ]
), "block_id")
