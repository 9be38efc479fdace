import pytest

from realm.model.networks.inputs import cheapest_length_groups


@pytest.mark.parametrize(
    ("forward_cost", "groups"),
    [
        # Two forwards (128 + 2·12 + 128 + 2·200 = 680) beat one padded to 200 (128 + 4·200 = 928).
        (128, [[0, 2], [3, 1]]),
        # A forward dearer than all the padding: one (1000 + 800 < 2000 + 424).
        (1000, [[0, 2, 3, 1]]),
        # Free forwards: every distinct length alone, equal lengths together.
        (0, [[0], [2], [3], [1]]),
    ],
)
def test_rows_are_grouped_by_length_where_the_padding_costs_more_than_another_forward(forward_cost, groups):
    assert cheapest_length_groups([10, 200, 12, 190], forward_cost) == groups


def test_rows_of_one_length_share_a_forward_and_no_rows_give_no_groups():
    assert cheapest_length_groups([50, 50, 50], 1) == [[0, 1, 2]]
    assert cheapest_length_groups([], 128) == []
