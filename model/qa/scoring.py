"""Scoring a run's answers per dataset: exact match, reader accuracy and answer recall@k.

Recall@k is the fraction of questions with an answer string in one of the top-k retrieved
blocks; reader accuracy is the exact match among the questions with an answer in the blocks
the reader read, which tells a reader that cannot read from a retriever that found nothing to
read. Free of Prefect, so `realm-evaluate` and scripts on machines without it score alike.
"""

from __future__ import annotations

from collections import defaultdict

from realm.model.qa.answer_metrics import answer_within, exact_match
from realm.model.qa.answering import answer_rank

RECALL_AT = (1, 5, 20)


def score_predictions(examples, predictions, num_read: int) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """Per-dataset metrics and PREDICTIONS rows for `predictions` of `examples` (same order);
    the reader read each question's top `num_read` blocks. `reader_accuracy` is None for a
    dataset where no question has an answer in them."""
    rows: dict[str, list[dict]] = defaultdict(list)
    hits: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for example, prediction in zip(examples, predictions, strict=True):
        em = exact_match(prediction.answer, example.answers, example.answer_type)
        rank = answer_rank(prediction.evidence, example.answers, example.answer_type)
        hits[example.dataset]["em"].append(em)
        if answer_within(rank, num_read):
            hits[example.dataset]["reader_accuracy"].append(em)
        for k in RECALL_AT:
            hits[example.dataset][f"recall_at_{k}"].append(answer_within(rank, k))
        rows[example.dataset].append(
            {
                "dataset": example.dataset,
                "question": example.question,
                "answers": list(example.answers),
                "prediction": prediction.answer,
                "score": float(prediction.score),
                "block_ids": [e.block_id for e in prediction.evidence],
                "block_probs": [float(e.probability) for e in prediction.evidence],
                "exact_match": em,
                "answer_rank": rank,
                "num_read": num_read,
            }
        )
    metrics = {
        dataset: {"reader_accuracy": None}
        | {name: sum(values) / len(values) for name, values in by_metric.items()}
        | {"n": len(by_metric["em"]), "n_answer_read": len(by_metric["reader_accuracy"])}
        for dataset, by_metric in hits.items()
    }
    return metrics, rows
