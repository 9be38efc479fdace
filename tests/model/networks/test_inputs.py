import torch

from realm.model.networks.inputs import (
    PAD_MULTIPLE,
    pad_batch,
    padded_length,
    same_padded_length_groups,
)


def test_a_length_is_padded_up_to_the_next_multiple_and_no_further():
    assert [padded_length(n) for n in (1, PAD_MULTIPLE, PAD_MULTIPLE + 1, 5 * PAD_MULTIPLE - 1)] == [
        PAD_MULTIPLE, PAD_MULTIPLE, 2 * PAD_MULTIPLE, 5 * PAD_MULTIPLE,
    ]


def test_rows_are_grouped_by_their_own_padded_length_shortest_first():
    short, long = PAD_MULTIPLE - 2, 4 * PAD_MULTIPLE + 3
    assert same_padded_length_groups([long, short, long - 1, short + 1]) == [
        ([1, 3], PAD_MULTIPLE), ([0, 2], 5 * PAD_MULTIPLE),
    ]
    assert same_padded_length_groups([]) == []


def test_rows_cut_or_padded_further_keep_their_tokens_and_mask_the_rest():
    inputs = pad_batch([([5, 6, 7], [0, 0, 1]), ([8], [0])], pad_id=0)
    cut = inputs.rows(torch.tensor([1]), 2)
    assert cut.input_ids.tolist() == [[8, 0]] and cut.attention_mask.tolist() == [[1, 0]]
    padded = inputs.rows(torch.tensor([0]), 5)
    assert padded.input_ids.tolist() == [[5, 6, 7, 0, 0]]
    assert padded.attention_mask.tolist() == [[1, 1, 1, 0, 0]]
    assert padded.token_type_ids.tolist() == [[0, 0, 1, 0, 0]]

