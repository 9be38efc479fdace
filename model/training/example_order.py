"""Which examples a trainer holds out and which it reads at each step: a seeded held-out split
and a batch order that is a pure function of (seed, step), so a resumed run reads exactly the
batches an uninterrupted one would."""

from __future__ import annotations

import numpy as np


def heldout_split(num_examples: int, heldout_examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out rows): the last `heldout_examples` of a permutation seeded by
    `seed` are held out, never trained on. At least one example is always left to train on."""
    if num_examples < 2:
        raise ValueError(f"need at least 2 examples to hold some out, got {num_examples}")
    heldout = min(heldout_examples, num_examples - 1)
    order = np.random.default_rng(seed).permutation(num_examples)
    return order[: num_examples - heldout], order[num_examples - heldout :]


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
