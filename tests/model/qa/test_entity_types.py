from realm.model.index.block_store import BlockStore
from realm.model.networks.entity_types import ENTITY_TYPE_IDS
from realm.model.qa.entity_types import BlockEntityTypes


def test_a_blocks_body_wordpieces_carry_the_types_of_the_entities_tagged_beside_the_blocks(qa_corpus, tokenizer):
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True, with_entities=True)
    entity_types = BlockEntityTypes(blocks, tokenizer)
    types = entity_types(-42)  # "Marie Curie was a Polish physicist who won two Nobel Prizes, in 1903 and 1911."
    assert len(types) == len(blocks.body_ids(-42))
    pieces = dict(zip(tokenizer.convert_ids_to_tokens(blocks.body_ids(-42)), types))
    assert pieces["1903"] == pieces["1911"] == ENTITY_TYPE_IDS["DATE"]
    assert pieces["polish"] == ENTITY_TYPE_IDS["NORP"]
    assert pieces["physicist"] == pieces["was"] == 0
    assert entity_types(-42) is types  # kept, not mapped again
