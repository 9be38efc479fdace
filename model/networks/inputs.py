"""BERT input tensors for the towers, the encoder and the reader, built from wordpiece ids.

Sequences are formatted by `realm.model.tokenization.join` (the one place that knows the
`[CLS] x [SEP] z [SEP]` layout) and padded here to the longest sequence of a batch, never to
a fixed length, so short batches cost what they hold. Answering pads each sequence to a length
of its own instead (`padded_length`, `same_padded_length_groups`), so that an answer hardly
depends on the other questions in its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertModel

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
    # The reader's, and the encoder's when pre-training marks the masked sentence's words:
    # [n, length] int64, 1 at block wordpieces of a word the question says
    # (`realm.model.networks.question_match`); None for the towers.
    question_match: torch.Tensor | None = None
    # The reader's only: [n, length] int64, the entity type id of each block wordpiece
    # (`realm.model.networks.entity_types`, 0: none).
    entity_types: torch.Tensor | None = None

    def to(self, device: torch.device) -> BertInputs:
        return BertInputs(**{name: t.to(device, non_blocking=True) for name, t in self._tensors().items()})

    def _tensors(self) -> dict[str, torch.Tensor]:
        extra = {name: getattr(self, name) for name in ("question_match", "entity_types") if getattr(self, name) is not None}
        return {**self.as_kwargs(), **extra}

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
        """The rows `index`, cut to their first `length` positions (beyond them, only padding),
        or padded further to `length` with masked positions (id 0: no real position attends
        to a masked one, so its id never reaches an output that is read)."""
        extra = max(length - self.input_ids.shape[1], 0)
        return BertInputs(**{name: F.pad(t[index, :length], (0, extra)) for name, t in self._tensors().items()})


# Answering pads a sequence to its length rounded up to a multiple of this, and reads only
# sequences of the same padded length together: attention's float sums change with how far a
# row is padded, not with which rows share its forward, so padding to a batch's longest made
# answers depend on who else asked (`bench/batch_invariance.py`). Not to the bit: oneDNN picks
# some Linear kernels by the number of rows.
PAD_MULTIPLE = 32


def padded_length(length: int) -> int:
    """`length` rounded up to a multiple of `PAD_MULTIPLE`."""
    return -(-length // PAD_MULTIPLE) * PAD_MULTIPLE


def same_padded_length_groups(lengths: Sequence[int]) -> list[tuple[list[int], int]]:
    """(row indices, their `padded_length`) for each padded length among `lengths`, shortest first."""
    groups: dict[int, list[int]] = {}
    for row, length in enumerate(lengths):
        groups.setdefault(padded_length(length), []).append(row)
    return [(rows, length) for length, rows in sorted(groups.items())]


def pad_batch(sequences: Sequence[tuple[list[int], list[int]]], pad_id: int, length: int | None = None) -> BertInputs:
    """Pad (input_ids, token_type_ids) pairs to `length` (default: the batch's longest sequence)."""
    length = max(len(ids) for ids, _ in sequences) if length is None else length
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(sequences), length), dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, (ids, types) in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        token_type_ids[row, : len(types)] = torch.tensor(types, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return BertInputs(input_ids, attention_mask, token_type_ids)


def body_positions(joint: BertInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """([n] position of each row's first body wordpiece, [n] body wordpieces) of padded
    `[CLS] x [SEP] z_body [SEP]` inputs, the body as `join` kept it (length 0 for the null
    document)."""
    body_lengths = joint.token_type_ids.sum(dim=1) - 1  # type-1 tokens: body + [SEP]
    return joint.attention_mask.sum(dim=1) - body_lengths - 1, body_lengths


def hidden_states_with_added_embeddings(bert: BertModel, joint: BertInputs, *added: torch.Tensor) -> torch.Tensor:
    """`bert`'s last hidden states [n, length, hidden] over `joint`, each of `added` ([n,
    length, hidden] learned input features: question match, entity types) summed into the
    word embeddings first. They are cast to the word embeddings' dtype: the feature vectors
    stay float32 when `bert` alone is cast to bf16 (`--bf16-reader`)."""
    embeddings = bert.embeddings.word_embeddings(joint.input_ids)
    for features in added:
        embeddings = embeddings + features.to(embeddings.dtype)
    return bert(
        inputs_embeds=embeddings, attention_mask=joint.attention_mask, token_type_ids=joint.token_type_ids
    ).last_hidden_state


def length_sorted_groups(lengths: Sequence[int], group_size: int) -> list[np.ndarray]:
    """Row indices grouped into batches of `group_size` by ascending length, so each padded
    batch holds sequences of similar length (a null document padded to 288 costs as much
    as a full block)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[start : start + group_size] for start in range(0, len(order), group_size)]


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
