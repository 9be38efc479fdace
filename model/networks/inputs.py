"""BERT input tensors for the towers, the encoder and the reader, built from wordpiece ids.

Sequences are formatted by `realm.model.tokenization.join` (the one place that knows the
`[CLS] x [SEP] z [SEP]` layout) and padded here to the longest sequence of a batch, never to
a fixed length, so short batches cost what they hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm.model.tokenization import (
    MAX_BLOCK_WORDPIECES,
    MAX_PRETRAIN_QUERY_WORDPIECES,
    WordPieceTokenizer,
    join,
)

# The knowledge-augmented encoder and the reader read `[CLS] x [SEP] z_body [SEP]`: a whole
# query plus a whole block body fit (3 specials <= the block's own 3, so the body is never cut).
MAX_JOINT_WORDPIECES = MAX_PRETRAIN_QUERY_WORDPIECES + MAX_BLOCK_WORDPIECES


@dataclass
class BertInputs:
    input_ids: torch.Tensor  # [n, length] int64
    attention_mask: torch.Tensor  # [n, length] int64, 1 for real tokens
    token_type_ids: torch.Tensor  # [n, length] int64

    def to(self, device: torch.device) -> BertInputs:
        return BertInputs(**{name: t.to(device, non_blocking=True) for name, t in self.as_kwargs().items()})

    def as_kwargs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments of a BERT forward."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "token_type_ids": self.token_type_ids,
        }

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, index: torch.Tensor, length: int) -> BertInputs:
        """The rows `index`, cut to their first `length` positions (beyond them, only padding)."""
        return BertInputs(**{name: t[index, :length] for name, t in self.as_kwargs().items()})


def pad_batch(sequences: Sequence[tuple[list[int], list[int]]], pad_id: int) -> BertInputs:
    """Pad (input_ids, token_type_ids) pairs to the batch's longest sequence."""
    length = max(len(ids) for ids, _ in sequences)
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(sequences), length), dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, (ids, types) in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        token_type_ids[row, : len(types)] = torch.tensor(types, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return BertInputs(input_ids, attention_mask, token_type_ids)


def length_sorted_groups(lengths: Sequence[int], group_size: int) -> list[np.ndarray]:
    """Row indices grouped into batches of `group_size` by ascending length, so each padded
    batch holds sequences of similar length (a null document padded to 288 costs as much
    as a full block)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[start : start + group_size] for start in range(0, len(order), group_size)]


def cheapest_length_groups(lengths: Sequence[int], forward_cost: int) -> list[list[int]]:
    """Row indices split into batches, each padded to its longest row, that minimise the
    wordpieces read plus `forward_cost` wordpieces per batch (what a forward pass costs beyond
    its wordpieces: streaming the weights). Rows sorted by length, split by dynamic
    programming over where each batch ends."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    cost = [0] + [float("inf")] * len(order)  # cost[end]: the cheapest split of the `end` shortest rows
    start_of = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        for start in range(end):
            candidate = cost[start] + forward_cost + (end - start) * longest
            if candidate < cost[end]:
                cost[end], start_of[end] = candidate, start
    groups, end = [], len(order)
    while end:
        groups.append(order[start_of[end] : end])
        end = start_of[end]
    return groups[::-1]


def block_sequence(
    tokenizer: WordPieceTokenizer, title_ids: Sequence[int], body_ids: Sequence[int]
) -> tuple[list[int], list[int]]:
    """The doc tower's input `[CLS] title [SEP] body [SEP]` (<= 288 wordpieces).

    The null document is `block_sequence(tokenizer, [], [])`: REALM embeds an empty block.
    """
    return join(tokenizer, list(title_ids), list(body_ids), MAX_BLOCK_WORDPIECES)


def joint_sequence(
    tokenizer: WordPieceTokenizer,
    query_ids: Sequence[int],
    body_ids: Sequence[int],
    max_length: int = MAX_JOINT_WORDPIECES,
) -> tuple[list[int], list[int]]:
    """`[CLS] x [SEP] z_body [SEP]`, the encoder's and reader's input; the null document is
    `body_ids=[]`. The body starts at `len(query_ids) + 2`."""
    return join(tokenizer, list(query_ids), list(body_ids), max_length)
