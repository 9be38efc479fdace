"""A tiny knowledge corpus Z built in code: (block_id, title, text), and how tests write a corpus."""

import pyarrow as pa
import pyarrow.compute as pc

from realm.model.qa.qa_data import QAExample
from realm.schemas import BLOCK_ENTITIES, BLOCKS, write_table
from realm.schemas.run_layout import entities_beside

# Block ids are signed 64-bit hashes in the real corpus; negative ones must work too.
CORPUS = [
    (-7, "Paris", "Paris is the capital and largest city of France, on the river Seine."),
    (11, "Seine", "The Seine flows through Paris into the English Channel at Le Havre."),
    (23, "Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    (-42, "Marie Curie", "Marie Curie was a Polish physicist who won two Nobel Prizes, in 1903 and 1911."),
    (57, "Ada Lovelace", "Ada Lovelace wrote the first algorithm intended for Babbage's Analytical Engine."),
    (68, "Nile", "The Nile is a river in Africa, flowing north into the Mediterranean Sea."),
    (9001, "Photosynthesis", "Photosynthesis converts light energy into chemical energy in plants and algae."),
    (-3, "Beethoven", "Ludwig van Beethoven was a German composer; he became deaf later in life."),
]
# Questions the corpus answers, a regex answer among them.
CORPUS_QUESTIONS = [
    QAExample("What is the capital of France?", ["Paris"], "test"),
    QAExample("Who wrote the first algorithm for the Analytical Engine?", ["Ada Lovelace"], "test"),
    QAExample("Which river flows north into the Mediterranean Sea?", ["the Nile"], "test"),
    QAExample("In which years did Marie Curie win Nobel Prizes?", [r"19(03|11)"], "trec", "regex"),
]


def write_corpus(blocks_path: str, blocks: pa.Table, entities: pa.Table) -> str:
    """`blocks` as a blocks/ artifact at `blocks_path` and the rows of `entities` that tag them
    as the block_entities/ beside it."""
    write_table(f"{blocks_path}/part-0.parquet", blocks, BLOCKS)
    tagging = entities.filter(pc.is_in(entities["block_id"], blocks["block_id"]))
    write_table(f"{entities_beside(blocks_path)}/part-0.parquet", tagging, BLOCK_ENTITIES)
    return blocks_path
