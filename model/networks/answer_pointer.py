"""The reader's answer pointer: the question ends in a `[MASK]` slot, and the span's start and
end are scored by how the slot's hidden state points at them (Splinter's question-aware span
selection, Ram et al. 2021), added to the span MLP's score.

Why: REALM's pre-training with `copy_from_block` trains exactly such a pointer, from a masked
slot of the sentence to the block wordpiece it copies (`realm.model.networks.block_copy`), and a
reader that drops it starts its span head from scratch: measured (docs/measurements.md, "Copying from the
block"), an encoder that copies in pre-training then hands fine-tuning no better reader.
Splinter found the same in few-shot QA: the pre-trained pointer is what transfers. Both the
start and the end pointer start from the copy head's query and key maps
(`AnswerPointer.start_from`); without a trained copy head they start as BERT's init, near zero.

    score(s, e) = MLP([h_s; h_e]) + q_start(h_slot) · k_start(h_s) / √d + q_end(h_slot) · k_end(h_e) / √d
"""

from __future__ import annotations

import math

import torch
from torch import nn

from realm.model.networks.block_copy import BlockCopyHead


class AnswerPointer(nn.Module):
    """Query and key maps of the start pointer and of the end pointer."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.start_query = nn.Linear(hidden_size, hidden_size)
        self.start_key = nn.Linear(hidden_size, hidden_size)
        self.end_query = nn.Linear(hidden_size, hidden_size)
        self.end_key = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, end) pointer scores of every position, [n, length] each, in `hidden`'s dtype.

        hidden: [n, length, hidden] the reader's hidden states; slots: [n] the position of
        each row's answer slot."""
        slot_hidden = hidden[torch.arange(len(hidden), device=hidden.device), slots]  # [n, hidden]
        scale = math.sqrt(hidden.shape[-1])
        start = torch.einsum("nh,nlh->nl", self.start_query(slot_hidden), self.start_key(hidden)) / scale
        end = torch.einsum("nh,nlh->nl", self.end_query(slot_hidden), self.end_key(hidden)) / scale
        return start, end

    @torch.no_grad()
    def start_from(self, copy_head: BlockCopyHead) -> None:
        """Both pointers take the copy head's query and key maps: at first a span scores by
        where pre-training's pointer, from the slot, would copy its first and its last wordpiece."""
        for query, key in ((self.start_query, self.start_key), (self.end_query, self.end_key)):
            query.load_state_dict(copy_head.query.state_dict())
            key.load_state_dict(copy_head.key.state_dict())
