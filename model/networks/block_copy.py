"""Copying a masked wordpiece from the block read: a pointer over the block's wordpieces
mixed into the MLM head's vocabulary distribution (See et al. 2017's pointer-generator).

REALM's encoder has to learn that a masked span it cannot guess sits in the block it reads,
and copy it out through attention into the tied vocabulary decoder. Measured here (docs/measurements.md,
"Retrieval that helps the masked LM"), a 6-layer encoder with a fresh head does not learn that
in 1,000 steps of batch 8 nor in 1,276 of batch 32: reading the block that holds the span adds
only 0.03-0.04 to held-out masked-span accuracy. The pointer gives copying its own path, which
is also the reader's job in fine-tuning (pointing at a span of the block):

    p(v | z, x) = λ p_vocab(v) + (1 − λ) Σ_{j ∈ body(z), z_j = v} softmax_j(q_i · k_j / √d)

q_i from the masked slot's hidden state, k_j from each body wordpiece's, λ = σ(g · h_i + b) per
slot. The null document has no body, so it reads p_vocab alone (λ = 1): what it cannot copy is
exactly what retrieval adds. Measured with it (docs/measurements.md, "Copying from the block"): the encoder
reads right 0.52 of the held-out spans its block holds (0.34 without), and retrieval's margin
over the null document reached +0.064, mostly by the null document scoring lower.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

# p_copy is 0 for wordpieces the body lacks; log of that (and its gradient) must stay finite.
_MIN_COPY_PROBABILITY = 1e-30


class BlockCopyHead(nn.Module):
    """The pointer's query and key projections and the per-slot gate, over hidden states."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.gate = nn.Linear(hidden_size, 1)

    def mix(
        self,
        vocab_log_probs: torch.Tensor,
        hidden: torch.Tensor,
        rows: torch.Tensor,
        positions: torch.Tensor,
        input_ids: torch.Tensor,
        body: torch.Tensor,
    ) -> torch.Tensor:
        """log p(v|z,x) with copying, float32 [masked, vocab].

        vocab_log_probs: [masked, vocab] the MLM head's log-softmax at each masked slot;
        hidden: [n, length, hidden] the sequences' hidden states; rows, positions: [masked]
        each slot's sequence and position in it; input_ids, body: [n, length] the sequences'
        wordpiece ids and which of them are the block's body. Slots whose sequence has no
        body keep `vocab_log_probs`.
        """
        masked_hidden = hidden[rows, positions]  # [masked, hidden]
        queries = self.query(masked_hidden)  # [masked, hidden]
        keys = self.key(hidden)  # [n, length, hidden]
        # The pointer's scores, softmax and sums in float32, also under bf16 autocast.
        with torch.autocast(hidden.device.type, enabled=False):
            scores = torch.einsum("mh,mlh->ml", queries.float(), keys[rows].float())  # [masked, length]
        scores = scores / math.sqrt(queries.shape[-1])
        body = body[rows]  # [masked, length]
        has_body = body.any(dim=1)  # [masked]
        # A row without a body would softmax over nothing; its copy term is dropped below.
        allowed = body | ~has_body[:, None]
        pointer = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # [masked, length]
        copy = torch.zeros_like(vocab_log_probs).scatter_add(1, input_ids[rows], pointer * body)  # [masked, vocab]
        gate = self.gate(masked_hidden).float().squeeze(-1)  # [masked], λ's logit
        mixed = torch.logaddexp(
            functional.logsigmoid(gate)[:, None] + vocab_log_probs,
            functional.logsigmoid(-gate)[:, None] + copy.clamp_min(_MIN_COPY_PROBABILITY).log(),
        )
        return torch.where(has_body[:, None], mixed, vocab_log_probs)
