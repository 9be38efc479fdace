import numpy as np

from realm.model.training.example_order import batch_rows, heldout_split, untrained_rows


def test_heldout_split_is_seeded_and_disjoint():
    train, heldout = heldout_split(100, 10, seed=3)
    assert len(heldout) == 10 and not set(train) & set(heldout)
    assert sorted([*train, *heldout]) == list(range(100))
    assert np.array_equal(heldout, heldout_split(100, 10, seed=3)[1])
    assert len(heldout_split(5, 10, seed=0)[0]) == 1  # never holds out everything


def test_batch_order_is_a_function_of_seed_and_step_and_covers_each_epoch():
    train = np.arange(10, 17)  # 7 rows, batches of 3 straddle epochs
    stream = np.concatenate([batch_rows(train, 3, seed=1, step=s) for s in range(7)])  # 3 epochs
    for epoch in range(3):
        assert sorted(stream[epoch * 7 : (epoch + 1) * 7]) == list(train)
    assert np.array_equal(batch_rows(train, 3, seed=1, step=4), stream[12:15])
    assert not np.array_equal(stream, np.concatenate([batch_rows(train, 3, seed=2, step=s) for s in range(7)]))


def test_untrained_rows_are_exactly_the_training_rows_no_batch_has_drawn_yet():
    train_rows = np.arange(100, 150)
    drawn = np.concatenate([batch_rows(train_rows, 4, 7, step) for step in range(5)])
    untrained = untrained_rows(train_rows, 4, 7, 5)
    assert len(untrained) == 30 and not set(untrained) & set(drawn)
    assert set(untrained) | set(drawn) == set(train_rows)
    assert len(untrained_rows(train_rows, 4, 7, 13)) == 0  # the first epoch is complete
