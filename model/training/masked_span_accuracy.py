"""How well pre-training predicts masked salient spans, with retrieval and with the null
document alone: the per-position marginal's prediction, whether a span is right, the counts
over evaluated examples that a paired (McNemar) test of the difference reads, and each
example's outcome (the MASKED_SPAN_OUTCOMES rows), so two runs compare example by example;
from those rows, where p(z|x) ranks the blocks the encoder could copy the span from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from realm.model.qa.paired_stats import mcnemar_exact_p_value
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


def copying_breakdown(outcomes: list[dict]) -> dict | None:
    """Where p(z|x) puts the blocks the encoder could copy the span from, over MASKED_SPAN_OUTCOMES
    rows; None when a row predates the per-candidate columns. A candidate's rank is 1 + the
    number read with a higher p(z|x) (the null document ranked with the rest). Counts:
    `span_in_candidates`, examples whose span a retrieved block holds, and of those
    `holder_rank_1`, `holder_rank_2`, `holder_rank_3`, `holder_rank_4_plus` by the best-ranked
    holder; `right_reading_holder`, those a holder read alone gets right, and of those
    `right_reading_holder_null_too`, also right from the sentence alone (the null document);
    `copied`, right only by reading a holder (the null document and every other block wrong),
    split by whether its best-ranked right holder is ranked first (`copied_holder_first`,
    `copied_holder_first_right` of them right with retrieval) or lower (`copied_holder_lower`,
    `copied_holder_lower_right`, with the mean p(z|x) of that holder and of the top candidate:
    `copied_holder_lower_p`, `copied_holder_lower_top_p`; None when there are none), and
    `reads_blocks`: whether any example read a block besides the null document (a closed-book
    run reads none, and every count is 0)."""
    if any(row.get("retrieval_log_probs") is None for row in outcomes):
        return None
    counts = dict.fromkeys(
        ("span_in_candidates", "holder_rank_1", "holder_rank_2", "holder_rank_3", "holder_rank_4_plus",
         "right_reading_holder", "right_reading_holder_null_too", "copied", "copied_holder_first",
         "copied_holder_first_right", "copied_holder_lower", "copied_holder_lower_right"),
        0,
    )
    lower_holder_p, lower_top_p = [], []
    for row in outcomes:
        log_p = np.asarray(row["retrieval_log_probs"], dtype=np.float64)
        holds = np.asarray(row["candidates_holding_span"], dtype=bool)
        right = np.asarray(row["candidates_right"], dtype=bool)
        if not holds.any():
            continue
        rank = 1 + (log_p[None, :] > log_p[:, None]).sum(axis=1)  # [k]
        counts["span_in_candidates"] += 1
        best = int(rank[holds].min())
        counts[f"holder_rank_{best}" if best <= 3 else "holder_rank_4_plus"] += 1
        right_holders = holds & right
        if not right_holders.any():
            continue
        counts["right_reading_holder"] += 1
        counts["right_reading_holder_null_too"] += bool(right[0])
        if (right & ~holds).any():
            continue
        counts["copied"] += 1
        first = int(np.flatnonzero(right_holders)[np.argmin(rank[right_holders])])
        where = "first" if rank[first] == 1 else "lower"
        counts[f"copied_holder_{where}"] += 1
        counts[f"copied_holder_{where}_right"] += bool(row["right_with_retrieval"])
        if where == "lower":
            lower_holder_p.append(float(np.exp(log_p[first])))
            lower_top_p.append(float(np.exp(log_p.max())))
    return {
        **counts,
        "copied_holder_lower_p": float(np.mean(lower_holder_p)) if lower_holder_p else None,
        "copied_holder_lower_top_p": float(np.mean(lower_top_p)) if lower_top_p else None,
        "reads_blocks": any(len(row["retrieval_log_probs"]) > 1 for row in outcomes),
    }
