"""Data contracts of every realm artifact, as pyarrow schemas.

One module per artifact family; `realm.schemas.io` writes and reads Parquet through them.
This package imports pyarrow only, so every other layer (Beam, torch, Prefect) may depend on it.
"""

from realm.schemas.block_entities import BLOCK_ENTITIES
from realm.schemas.blocks import BLOCKS
from realm.schemas.dead_letter import DEAD_LETTER, MAX_RAW_CHARS, dead_letter_record
from realm.schemas.documents import DOCUMENTS
from realm.schemas.embeddings import EMBEDDING_DIM, EMBEDDINGS
from realm.schemas.examples import ICT_EXAMPLES, PRETRAIN_EXAMPLES, SPAN
from realm.schemas.io import (
    ArtifactError,
    SchemaMismatchError,
    UnreadableArtifactError,
    read_table,
    validate_table,
    write_table,
)
from realm.schemas.masked_spans import MASKED_SPAN_OUTCOMES
from realm.schemas.pooled_states import POOLED_STATES
from realm.schemas.predictions import PREDICTIONS
from realm.schemas.reproduction import REPRODUCTION_RESULTS

# Artifact directory name -> schema: what `realm prepare` writes under a run root.
PREPARED_ARTIFACTS = {
    "documents": DOCUMENTS,
    "blocks": BLOCKS,
    "block_entities": BLOCK_ENTITIES,
    "pretrain_examples": PRETRAIN_EXAMPLES,
    "ict_examples": ICT_EXAMPLES,
    "dead_letter": DEAD_LETTER,
}
# Artifact directory name -> schema: what `realm` writes under a run root.
ARTIFACTS = {
    **PREPARED_ARTIFACTS,
    "embeddings": EMBEDDINGS,
    "pooled_states": POOLED_STATES,
    "predictions": PREDICTIONS,
    "masked_spans": MASKED_SPAN_OUTCOMES,
    "reproduction": REPRODUCTION_RESULTS,
}

__all__ = [
    "ARTIFACTS",
    "ArtifactError",
    "BLOCKS",
    "BLOCK_ENTITIES",
    "DEAD_LETTER",
    "DOCUMENTS",
    "EMBEDDINGS",
    "EMBEDDING_DIM",
    "ICT_EXAMPLES",
    "MASKED_SPAN_OUTCOMES",
    "MAX_RAW_CHARS",
    "POOLED_STATES",
    "PREDICTIONS",
    "PREPARED_ARTIFACTS",
    "PRETRAIN_EXAMPLES",
    "REPRODUCTION_RESULTS",
    "SPAN",
    "SchemaMismatchError",
    "UnreadableArtifactError",
    "dead_letter_record",
    "read_table",
    "validate_table",
    "write_table",
]
