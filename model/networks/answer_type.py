"""Whether a span is one whole named entity, and of which type, scored against the question:
the answer-type match of pre-neural QA systems (Harabagiu et al. 2000; Pasca & Harabagiu
2001), learned end to end here instead of from a taxonomy of wh-words.

The reader sees each block wordpiece's entity type as an input vector
(`realm.model.networks.entity_types`), but whether a *span* is exactly one entity, and
whether that type is what the question asks for, reaches its score only through the span's
two end states. Of the questions it gets wrong with an answer among the blocks it reads, most
are answered with another entity (docs/measurements.md, "The answer type"). Here the mean of
the question's wordpiece states maps to one score per entity type (and one for a span that
is no single entity), and each span adds the score of its type. The map starts at zero, so a
reader reads as it did until it learns.
"""

from __future__ import annotations

import torch
from torch import nn

from realm.model.networks.entity_types import NUM_ENTITY_TYPES


def entity_span_types(entity_types: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """[n, spans] int64: the type id of each span that covers one entity exactly (every
    wordpiece of that type, the ones just outside it of another), else 0.

    entity_types: [n, length] the joint inputs' wordpiece type ids (0 outside an entity);
    starts, ends: [n, spans] each span's first and last positions (`SpanTable`), which may run
    past `length` for invalid spans (read off the last position, never used). Two entities of
    one type side by side read as one."""
    length = entity_types.shape[1]
    changes = torch.ones_like(entity_types, dtype=torch.bool)
    changes[:, 1:] = entity_types[:, 1:] != entity_types[:, :-1]
    runs = changes.long().cumsum(dim=1)  # [n, length]: one id per run of equal types
    ends_run = torch.ones_like(changes)  # True where a run's last position is
    ends_run[:, :-1] = changes[:, 1:]
    starts, ends = starts.clamp(max=length - 1), ends.clamp(max=length - 1)
    whole = (
        changes.gather(1, starts) & ends_run.gather(1, ends) & (runs.gather(1, starts) == runs.gather(1, ends))
    )
    types = entity_types.gather(1, starts)
    return torch.where(whole, types, torch.zeros_like(types))


class AnswerType(nn.Module):
    """A linear map, from zero, of the mean of the question's wordpiece states to a score per
    entity type; a span's score is its `entity_span_types` type's."""

    def __init__(self, hidden_size: int):
        super().__init__()
        # No bias, by choice: a constant score a type would be a prior over types learned from the
        # training questions' answers, not a match with the question asked.
        self.score = nn.Linear(hidden_size, NUM_ENTITY_TYPES, bias=False)
        nn.init.zeros_(self.score.weight)

    def forward(
        self, hidden: torch.Tensor, question_mask: torch.Tensor, entity_types: torch.Tensor, starts: torch.Tensor,
        ends: torch.Tensor,
    ) -> torch.Tensor:
        """[n, spans] each span's answer-type score. hidden: [n, length, d] the reader's last
        states; question_mask: [n, length] True at the question's wordpieces."""
        weights = question_mask.to(hidden.dtype)
        question = (hidden * weights[..., None]).sum(dim=1) / weights.sum(dim=1, keepdim=True).clamp(min=1)  # [n, d]
        return self.score(question).gather(1, entity_span_types(entity_types, starts, ends))
