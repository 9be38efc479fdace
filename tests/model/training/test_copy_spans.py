import pyarrow as pa

from realm.model.index.block_store import BlockStore
from realm.model.training.copy_spans import copy_friendly_examples, span_holders

# Wordpiece ids stand for words. Besides the origin block 0, which holds all three, span
# A = (7, 8) is in blocks 1 and 2, span B = (9,) in blocks 2, 3 and 4, span C = (5,) in none.
BLOCKS = BlockStore(
    pa.table(
        {
            "block_id": pa.array([0, 1, 2, 3, 4], pa.int64()),
            "title_token_ids": pa.array([[1]] * 5, pa.list_(pa.int32())),
            "body_token_ids": pa.array(
                [[5, 7, 8, 9], [2, 7, 8, 3], [7, 8, 9, 9], [9, 4], [4, 9, 6]], pa.list_(pa.int32())
            ),
        }
    )
)


def _span(start: int, end: int) -> dict:
    return {"start": 0, "end": 0, "token_start": start, "token_end": end, "label": "X", "source": "ner"}


def _example(example_id: int, forbidden: list[int], seeded: list[int]) -> dict:
    # token_ids 5 7 8 6 9: spans C = [0, 1), A = [1, 3), B = [4, 5)
    return {
        "example_id": example_id,
        "forbidden_block_ids": forbidden,
        "token_ids": [5, 7, 8, 6, 9],
        "spans": [_span(0, 1), _span(1, 3), _span(4, 5)],
        "masked_token_positions": seeded,
    }


def test_holders_are_the_blocks_holding_the_span_verbatim():
    holders = span_holders([_example(1, [0], [4])], BLOCKS)
    assert holders[(7, 8)] == {0, 1, 2}
    assert holders[(9,)] == {0, 2, 3, 4}
    assert holders[(5,)] == {0}


def test_the_span_fewest_other_blocks_hold_is_masked():
    # outside the forbidden block 0: C is held by none, A by 2, B by 3
    (chosen,) = copy_friendly_examples([_example(1, [0], [4])], BLOCKS, max_blocks=3)
    assert chosen["masked_token_positions"] == [1, 2]
    assert chosen["example_id"] == 1


def test_forbidden_blocks_do_not_count_and_ties_keep_the_seeded_span():
    # with blocks 0, 1, 3 and 4 forbidden, A and B are each held by block 2 alone: a tie
    forbidden = [0, 1, 3, 4]
    (chosen,) = copy_friendly_examples([_example(1, forbidden, [4])], BLOCKS, max_blocks=3)
    assert chosen["masked_token_positions"] == [4]
    (chosen,) = copy_friendly_examples([_example(1, forbidden, [0])], BLOCKS, max_blocks=3)
    assert chosen["masked_token_positions"] == [1, 2]  # neither is seeded: the earliest


def test_examples_without_a_rare_held_span_are_left_out():
    examples = [_example(1, [0], [4]), _example(2, [0, 2], [4])]
    # example 1: A held by 2 others; example 2: A by block 1 alone, B by 3 and 4
    assert [e["example_id"] for e in copy_friendly_examples(examples, BLOCKS, max_blocks=1)] == [2]
    assert copy_friendly_examples(examples, BLOCKS, max_blocks=1)[0]["masked_token_positions"] == [1, 2]
    assert copy_friendly_examples([_example(3, [0, 1, 2, 3, 4], [4])], BLOCKS, max_blocks=5) == []
