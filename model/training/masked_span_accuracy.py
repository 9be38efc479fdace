"""How well pre-training predicts masked salient spans, with retrieval and with the null
document alone: the per-position marginal's prediction, whether a span is right, the counts
over evaluated examples that a paired (McNemar) test of the difference reads, and each
example's outcome (the MASKED_SPAN_OUTCOMES rows), so two runs compare example by example.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from realm.model.qa.paired_stats import mcnemar_exact_p_value
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
    """Examples counted batch by batch; `summary` gives `PretrainTrainer.evaluate_masked_spans`'
    dict, `outcomes` one MASKED_SPAN_OUTCOMES row per example."""

    examples: int = 0
    with_retrieval: int = 0
    null_only: int = 0
    in_candidates: int = 0
    only_with_retrieval: int = 0
    only_null: int = 0
    in_candidates_with_retrieval: int = 0
    in_candidates_null_only: int = 0
    in_candidates_reading_it: int = 0
    _rows: list[tuple[int, bool, bool, bool, bool]] = field(default_factory=list)

    def add(
        self, example_ids: list[int], retrieval_right: torch.Tensor, null_right: torch.Tensor, span_found: np.ndarray,
        right_reading_holder: torch.Tensor,
    ) -> None:
        """One batch: the examples' ids, then [batch] bool each, whether retrieval / the null
        document alone got the span right, whether the span occurs verbatim in a retrieved
        block, and whether the encoder reading one such block alone (its p(y|z,x), not the
        marginal) gets it right."""
        found = torch.from_numpy(span_found)
        self._rows += zip(
            example_ids, retrieval_right.tolist(), null_right.tolist(), span_found.tolist(), right_reading_holder.tolist()
        )
        self.examples += len(span_found)
        self.with_retrieval += retrieval_right.sum().item()
        self.null_only += null_right.sum().item()
        self.only_with_retrieval += (retrieval_right & ~null_right).sum().item()
        self.only_null += (null_right & ~retrieval_right).sum().item()
        self.in_candidates += int(span_found.sum())
        self.in_candidates_with_retrieval += (retrieval_right & found).sum().item()
        self.in_candidates_null_only += (null_right & found).sum().item()
        self.in_candidates_reading_it += (right_reading_holder & found).sum().item()

    def summary(self) -> dict:
        return {
            "accuracy_with_retrieval": self.with_retrieval / self.examples,
            "accuracy_null_only": self.null_only / self.examples,
            "span_in_candidates": self.in_candidates / self.examples,
            "right_only_with_retrieval": self.only_with_retrieval,
            "right_only_null": self.only_null,
            "span_in_candidates_right_with_retrieval": self.in_candidates_with_retrieval,
            "span_in_candidates_right_null_only": self.in_candidates_null_only,
            "span_in_candidates_right_reading_that_block": self.in_candidates_reading_it,
            "paired_p_value": mcnemar_exact_p_value(self.only_with_retrieval, self.only_null),
            "examples": self.examples,
        }

    def outcomes(self, step: int) -> list[dict]:
        """One MASKED_SPAN_OUTCOMES row per example counted, in the order added."""
        names = ("example_id", "right_with_retrieval", "right_null_only", "span_in_candidates", "right_reading_holder")
        return [{"step": step, **dict(zip(names, row))} for row in self._rows]
