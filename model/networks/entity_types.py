"""Named-entity types as a reader input feature (DrQA's NER token feature): each block
wordpiece inside an entity spaCy found carries its label's id, and the reader adds a learned
vector per type (`realm.model.networks.reader.Reader.entity_type`). The entities come from
the corpus's `block_entities/` artifact (`realm.pipelines.entities`), mapped to wordpieces by
`realm.model.qa.entity_types.BlockEntityTypes`.
"""

from __future__ import annotations

from collections.abc import Sequence

# The OntoNotes labels of spaCy's NER (`realm.pipelines.ner`); id 0 is "no entity".
ENTITY_LABELS = (
    "CARDINAL", "DATE", "EVENT", "FAC", "GPE", "LANGUAGE", "LAW", "LOC", "MONEY",
    "NORP", "ORDINAL", "ORG", "PERCENT", "PERSON", "PRODUCT", "QUANTITY", "TIME", "WORK_OF_ART",
)
ENTITY_TYPE_IDS = {label: i + 1 for i, label in enumerate(ENTITY_LABELS)}
NUM_ENTITY_TYPES = len(ENTITY_LABELS) + 1


def wordpiece_entity_types(
    offsets: Sequence[tuple[int, int]] | None, length: int, entities: Sequence[tuple[int, int, str]]
) -> list[int]:
    """The type id of each of `length` wordpieces at character `offsets` (None: a text that is
    not the body's, all 0), given (start, end, label) entities of the text."""
    types = [0] * length
    if offsets is None:
        return types
    for start, end, label in entities:
        type_id = ENTITY_TYPE_IDS.get(label, 0)
        for i, (first, last) in enumerate(offsets):
            if first >= start and last <= end and last > first:
                types[i] = type_id
    return types

