import numpy as np

from realm.model.training.example_order import batch_rows, heldout_split, untrained_rows


def test_heldout_split_follows_the_example_ids_not_their_rows():
    ids = np.arange(1000, 1100)
    train, heldout = heldout_split(ids, 10)
    assert len(heldout) == 10 and not set(train) & set(heldout)
    assert sorted([*train, *heldout]) == list(range(100))
    # The same examples in another row order (a re-prepare's shards): the same ids held out.
    shuffled = np.random.default_rng(0).permutation(ids)
    assert set(shuffled[heldout_split(shuffled, 10)[1]]) == set(ids[heldout])
    # A re-prepare that adds examples holds out none the smaller set trained on.
    grown = np.arange(1000, 1200)
    assert set(grown[heldout_split(grown, 10)[1]]) <= set(ids[heldout]) | set(range(1100, 1200))
    assert len(heldout_split(ids[:5], 10)[0]) == 1  # never holds out everything


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
