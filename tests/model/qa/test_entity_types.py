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


def test_only_the_most_recently_read_blocks_are_kept(qa_corpus, tokenizer):
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True, with_entities=True)
    entity_types = BlockEntityTypes(blocks, tokenizer, max_blocks=2)
    blocks_types = BlockEntityTypes(blocks, tokenizer)
    first = entity_types(-42)
    entity_types(11)
    assert entity_types(-42) is first  # read again: the most recent now
    entity_types(23)  # pushes out 11, the least recently read
    assert entity_types(-42) is first
    assert entity_types(11) == blocks_types(11)  # mapped again; -42 the least recent now
    entity_types(23)
    again = entity_types(-42)
    assert again is not first and again == first
