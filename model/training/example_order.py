"""Which examples a trainer holds out and which it reads at each step: a held-out split by a
hash of the example ids and a batch order that is a pure function of (seed, step), so a resumed
run reads exactly the batches an uninterrupted one would."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def heldout_split(example_ids: Sequence[int], heldout_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out rows), each in row order: the `heldout_examples` examples whose
    ids hash lowest are held out, never trained on. Which side an example is on follows from
    its id, not its row, so a re-prepare (whose shards order the rows anew) holds out the same
    examples, and one that adds examples holds out none that were trained on before. At least
    one example is always left to train on."""
    count = len(example_ids)
    if count < 2:
        raise ValueError(f"need at least 2 examples to hold some out, got {count}")
    heldout = min(heldout_examples, count - 1)
    ranked = np.argsort(id_hashes(example_ids), kind="stable")
    return np.sort(ranked[heldout:]), np.sort(ranked[:heldout])


def id_hashes(ids: Sequence[int]) -> np.ndarray:
    """splitmix64 of each int64 id: fixed, well mixed even for ids 0, 1, 2, ... ([n] uint64)."""
    z = np.asarray(ids, dtype=np.int64).view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)  # wraps mod 2**64, as intended
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def batch_rows(train_rows: np.ndarray, batch_size: int, seed: int, step: int) -> np.ndarray:
    """The rows of batch `step` (0-based): consecutive slices of an endless stream of epochs,
    each a permutation of `train_rows` seeded by (seed, epoch). A pure function of its
    arguments, so resuming at any step reads the same batches as running straight through;
    a batch that straddles two epochs takes the end of one and the start of the next."""
    count = len(train_rows)
    positions = np.arange(step * batch_size, (step + 1) * batch_size)  # in the endless stream
    epochs = positions // count
    rows = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        permutation = np.random.default_rng((seed, int(epoch))).permutation(count)
        in_epoch = epochs == epoch
        rows[in_epoch] = train_rows[permutation[positions[in_epoch] % count]]
    return rows


def untrained_rows(train_rows: np.ndarray, batch_size: int, seed: int, steps: int) -> np.ndarray:
    """The training rows that no batch of steps [0, steps) has drawn (`batch_rows`' stream),
    in a seeded random order: never trained on, so a held-out set as good as the held-out
    rows, and larger. Empty once the first epoch is complete."""
    drawn = steps * batch_size
    if drawn >= len(train_rows):
        return np.empty(0, dtype=train_rows.dtype)
    permutation = np.random.default_rng((seed, 0)).permutation(len(train_rows))  # epoch 0 of the stream
    return train_rows[permutation[drawn:]]
