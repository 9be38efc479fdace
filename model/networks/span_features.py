"""What the span scorer cannot read off a span's two end states: its width, and how near it
lies to the block's words that the question says.

The reader scores a span from MLP(W_s h_start + W_e h_end) (`realm.model.networks.reader`):
the width enters only through what 6 layers of attention leave of the position embeddings,
and nearness to the question's words only through what attention makes of the
question-match flags. The reader misreads most by picking another entity of the right kind
from the right block, typically another date than the one beside the question's words
(docs/measurements.md: the questions asking for a time). Span-level features are the span
models' usual answer to both (the width feature φ of Lee et al. 2017's span scorer; the
distance-to-question-word features of pre-neural readers, Richardson et al. 2013): a
learned vector per width, per bucket of the distance from the span to the nearest block
wordpiece the question says, and for whether the span itself holds one, summed into the
span MLP's hidden layer before its ReLU. All three start at zero, so a reader reads as it
did until they learn.
"""

from __future__ import annotations

import torch
from torch import nn

# Upper bounds (in wordpieces) of the distance buckets, from a span's nearer end to the
# closest block wordpiece the question says outside it: 1, 2, 3, 4-5, 6-8, 9-13, 14-21,
# beyond; one more bucket for a block with no such wordpiece outside the span.
DISTANCE_BOUNDS = (1, 2, 3, 5, 8, 13, 21)
NUM_DISTANCE_BUCKETS = len(DISTANCE_BOUNDS) + 2
_NONE = NUM_DISTANCE_BUCKETS - 1


def span_feature_ids(
    question_match: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(width − 1, distance bucket, holds a question word) of each span, each [n, spans] int64.

    question_match: [n, length] the joint inputs' flags (1 at each block wordpiece inside a
    word the question says); starts, ends: [n, spans] each span's first and last positions in
    the joint input (`SpanTable`), which may run past `length` for invalid spans (their
    features are read off the last position and never used)."""
    n, length = question_match.shape
    flagged = question_match > 0
    positions = torch.arange(length, device=question_match.device).expand(n, length)
    # The nearest flagged position at or before / at or after each position; −far / far where none,
    # so a span's distance to a missing flag exceeds `length`.
    far = 2 * length
    before = torch.where(flagged, positions, torch.full_like(positions, -far)).cummax(dim=1).values
    after = torch.where(flagged, positions, torch.full_like(positions, far)).flip(1).cummin(dim=1).values.flip(1)
    before = torch.cat([torch.full_like(before[:, :1], -far), before], dim=1)  # [n, length + 1]: before[p] is at or before p − 1
    after = torch.cat([after, torch.full_like(after[:, :1], far)], dim=1)  # after[p + 1] is at or after p + 1
    counts = torch.cat([torch.zeros_like(positions[:, :1]), flagged.long().cumsum(dim=1)], dim=1)  # counts[p]: flags before p

    starts, ends = starts.clamp(max=length - 1), ends.clamp(max=length - 1)
    left = starts - before.gather(1, starts)  # to the nearest flag before the span
    right = after.gather(1, ends + 1) - ends  # to the nearest flag after it
    distance = torch.minimum(left, right)
    # Compared with Python numbers, not bucketized against a tensor of bounds: no copy to the device per call.
    bucket = sum((distance > bound).long() for bound in DISTANCE_BOUNDS)
    bucket = torch.where(distance > length, torch.full_like(distance, _NONE), bucket)
    holds = (counts.gather(1, ends + 1) - counts.gather(1, starts)) > 0
    return ends - starts, bucket, holds.long()


class SpanFeatures(nn.Module):
    """Learned vectors of a span's width, distance bucket and question-word holding
    (`span_feature_ids`), summed: [n, spans, span_hidden], added to the span MLP's hidden layer.
    The three tables are summed into one of every combination first (10 x 9 x 2 rows), so a
    span takes one lookup and its backward one scatter, not three."""

    def __init__(self, max_span: int, span_hidden_size: int):
        super().__init__()
        self.width = nn.Embedding(max_span, span_hidden_size)
        self.distance = nn.Embedding(NUM_DISTANCE_BUCKETS, span_hidden_size)
        self.holds_question_word = nn.Embedding(2, span_hidden_size)
        for embedding in (self.width, self.distance, self.holds_question_word):
            nn.init.zeros_(embedding.weight)

    @property
    def max_span(self) -> int:
        return self.width.num_embeddings

    def forward(self, question_match: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        width, distance, holds = span_feature_ids(question_match, starts, ends)
        combined = (
            self.width.weight[:, None, None] + self.distance.weight[None, :, None] + self.holds_question_word.weight[None, None]
        )  # [max_span, buckets, 2, span_hidden]
        index = (width * NUM_DISTANCE_BUCKETS + distance) * 2 + holds
        return nn.functional.embedding(index, combined.flatten(0, 2))
