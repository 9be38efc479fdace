"""The REALM objective as pure tensor functions: marginal likelihood over retrieved documents.

p(y|x) = Σ_z p(y|z,x) p(z|x) over the top-k candidates, with p(z|x) a softmax over the
candidates' relevance scores f(x,z) recomputed with the current parameters, so the gradient
reaches both retriever towers: ∇ log p(y|x) = Σ_z r(z) ∇f(x,z),
r(z) = [p(y|z,x) / p(y|x) − 1] p(z|x) (Guu et al. 2020, §3.3). Everything is computed in
float32, whatever precision the forward passes ran in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# log of "impossible" for masked entries. Finite, unlike -inf, so a row whose entries are all
# masked yields finite (zero-weight) gradients instead of NaN; exp() of it is exactly 0.
LOG_ZERO = -1e30


def as_float32_or_wider(values: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 -> float32; float32 and float64 unchanged (tests check gradients in float64)."""
    return values.to(torch.promote_types(values.dtype, torch.float32))


def mask_log_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`scores` where `mask`, LOG_ZERO elsewhere (padding candidates, invalid spans)."""
    return as_float32_or_wider(scores).masked_fill(~mask, LOG_ZERO)


def masked_logsumexp(values: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log Σ exp(values) over the entries where `mask`; ≈ LOG_ZERO where none are."""
    return torch.logsumexp(mask_log_scores(values, mask), dim=dim)


def marginal_log_likelihood(
    retrieval_logits: torch.Tensor,
    log_p_y_given_z: torch.Tensor,
    candidate_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """log p(y|x) = logsumexp_z(log_softmax_z f(x,z) + log p(y|z,x)).

    retrieval_logits: [batch, k] f(x,z) of each candidate (null document included).
    log_p_y_given_z: [batch, k] from the encoder (pre-training) or reader (fine-tuning).
    candidate_mask: [batch, k] False for padding candidates, which then get p(z|x) = 0.
    Returns [batch].
    """
    if candidate_mask is not None:
        retrieval_logits = mask_log_scores(retrieval_logits, candidate_mask)
    log_p_z_given_x = torch.log_softmax(as_float32_or_wider(retrieval_logits), dim=-1)  # [batch, k]
    return torch.logsumexp(log_p_z_given_x + as_float32_or_wider(log_p_y_given_z), dim=-1)  # [batch]


def early_update_loss(
    retrieval_logits: torch.Tensor,
    gold_mask: torch.Tensor,
    candidate_mask: torch.Tensor | None = None,
    count_all: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """ORQA's retriever loss: mean over examples of −log Σ_{z holding the answer} p(z|x).

    retrieval_logits: [batch, k]; gold_mask: [batch, k] True where the candidate's body
    contains the answer. Examples where no candidate holds it carry no signal and are left
    out of the mean; with none at all the loss is 0 (still connected to the graph).
    `count_all`: where this batch is one process's share, its count of examples → the whole
    batch's (`realm.model.training.distributed.sum_counts`), so the shares' losses sum to the mean.
    """
    if candidate_mask is not None:
        retrieval_logits = mask_log_scores(retrieval_logits, candidate_mask)
        gold_mask = gold_mask & candidate_mask
    log_p_z_given_x = torch.log_softmax(as_float32_or_wider(retrieval_logits), dim=-1)  # [batch, k]
    log_p_gold = masked_logsumexp(log_p_z_given_x, gold_mask, dim=-1)  # [batch]
    answerable = gold_mask.any(dim=-1)  # [batch]
    per_example = torch.where(answerable, -log_p_gold, torch.zeros_like(log_p_gold))
    count = answerable.sum() if count_all is None else count_all(answerable.sum())
    return per_example.sum() / count.clamp(min=1)
