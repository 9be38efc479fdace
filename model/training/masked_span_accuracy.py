"""How well pre-training predicts masked salient spans, with retrieval and with the null
document alone: the per-position marginal's prediction, whether a span is right, the counts
over evaluated examples that a paired (McNemar) test of the difference reads, and each
example's outcome (the MASKED_SPAN_OUTCOMES rows), so two runs compare example by example
(`realm.model.analysis.masked_span_comparison`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from realm.model.analysis.paired_stats import mcnemar_exact_p_value
from realm.model.training.candidates import Candidates
from realm.model.training.pretrain_step import PretrainBatch


def span_correct(predictions: torch.Tensor, batch: PretrainBatch) -> torch.Tensor:
    """[batch, ...] bool: every masked wordpiece of the example predicted exactly, from
    predictions [batch, ..., max_masks] (e.g. [batch, k, max_masks]: one per candidate read)."""
    shape = (len(batch.mlm_targets),) + (1,) * (predictions.dim() - 2) + (-1,)
    wrong = (predictions.cpu() != batch.mlm_targets.view(shape)) & batch.mlm_mask.view(shape)
    return ~wrong.any(dim=-1)


def marginal_predictions(log_p_z_given_x: torch.Tensor, vocab_log_probs: torch.Tensor) -> torch.Tensor:
    """argmax_v Σ_z p(z|x) p(v|z,x) at each masked slot: log_p_z_given_x [batch, k],
    vocab_log_probs [batch, k, max_masks, vocab] -> [batch, max_masks]. Per position, like
    the MLM objective itself (which factorises over the masked wordpieces given z)."""
    marginal = torch.logsumexp(log_p_z_given_x[:, :, None, None] + vocab_log_probs, dim=1)  # [batch, max_masks, vocab]
    return marginal.argmax(dim=-1)


@dataclass
class MaskedSpanTally:
    """Each evaluated example's outcome, batch by batch; `summary` counts them into
    `PretrainTrainer.evaluate_masked_spans`' dict, `outcomes` gives them as MASKED_SPAN_OUTCOMES rows."""

    _rows: list[dict] = field(default_factory=list)

    def add(
        self, example_ids: list[int], retrieval_right: torch.Tensor, candidates: Candidates,
        log_p_z_given_x: torch.Tensor, holding: np.ndarray, right_per_candidate: torch.Tensor,
    ) -> None:
        """One batch: the examples' ids; [batch] bool, whether retrieval (the marginal) got the
        span right; the candidates read (null document in column 0) with their log p(z|x)
        [batch, k]; [batch, k] bool, which hold the span verbatim and which the encoder reading
        alone (its p(y|z,x), not the marginal) gets right. Padding candidates are left out."""
        for row, example_id in enumerate(example_ids):
            real = candidates.mask[row]
            right = right_per_candidate[row].cpu().numpy()[real]
            holds = holding[row][real]
            self._rows.append({
                "example_id": example_id,
                "right_with_retrieval": bool(retrieval_right[row]),
                "right_null_only": bool(right[0]),
                "span_in_candidates": bool(holds.any()),
                "right_reading_holder": bool((right & holds).any()),
                "candidate_block_ids": candidates.block_ids[row][real].tolist(),
                "retrieval_log_probs": log_p_z_given_x[row].float().cpu().numpy()[real].tolist(),
                "candidates_holding_span": holds.tolist(),
                "candidates_right": right.tolist(),
            })

    def summary(self) -> dict:
        def count(holds) -> int:
            return sum(bool(holds(row)) for row in self._rows)

        examples = len(self._rows)
        only_with_retrieval = count(lambda r: r["right_with_retrieval"] and not r["right_null_only"])
        only_null = count(lambda r: r["right_null_only"] and not r["right_with_retrieval"])
        return {
            "accuracy_with_retrieval": count(lambda r: r["right_with_retrieval"]) / examples,
            "accuracy_null_only": count(lambda r: r["right_null_only"]) / examples,
            "span_in_candidates": count(lambda r: r["span_in_candidates"]) / examples,
            "right_only_with_retrieval": only_with_retrieval,
            "right_only_null": only_null,
            "span_in_candidates_right_with_retrieval": count(lambda r: r["span_in_candidates"] and r["right_with_retrieval"]),
            "span_in_candidates_right_null_only": count(lambda r: r["span_in_candidates"] and r["right_null_only"]),
            "span_in_candidates_right_reading_that_block": count(
                lambda r: r["span_in_candidates"] and r["right_reading_holder"]
            ),
            "paired_p_value": mcnemar_exact_p_value(only_with_retrieval, only_null),
            "examples": examples,
        }

    def outcomes(self, step: int) -> list[dict]:
        """One MASKED_SPAN_OUTCOMES row per example counted, in the order added."""
        return [{**row, "step": step} for row in self._rows]
