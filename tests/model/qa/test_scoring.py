from realm.model.qa.answering import Evidence, Prediction
from realm.model.qa.qa_data import QAExample
from realm.model.qa.scoring import score_predictions


def _prediction(question: str, answer: str, block_texts: list[str]) -> Prediction:
    evidence = [Evidence(block_id=i, title=f"t{i}", text=text, probability=1 / len(block_texts))
                for i, text in enumerate(block_texts)]
    return Prediction(question, answer, score=-0.5, probability=0.6, evidence=evidence, block_id=0)


def test_scores_per_dataset_with_reader_accuracy_over_answers_read():
    examples = [
        QAExample("q1", ["Paris"], "a"),  # answer in block 0, read, right
        QAExample("q2", ["Rome"], "a"),  # answer in block 2, not read (num_read 2), wrong
        QAExample("q3", ["Oslo"], "a"),  # answer in no block, right anyway
        QAExample("q4", [r"19\d\d"], "b", answer_type="regex"),  # in block 1, read, wrong
    ]
    blocks = ["Paris is in France.", "It was 1969.", "Rome is in Italy."]
    predictions = [
        _prediction("q1", "Paris", blocks),
        _prediction("q2", "Milan", blocks),
        _prediction("q3", "Oslo", blocks),
        _prediction("q4", "July", blocks),
    ]

    metrics, rows = score_predictions(examples, predictions, num_read=2)

    assert metrics["a"] == {
        "reader_accuracy": 1.0, "em": 2 / 3, "recall_at_1": 1 / 3, "recall_at_5": 2 / 3, "recall_at_20": 2 / 3,
        "n": 3, "n_answer_read": 1,
    }
    assert metrics["b"]["em"] == 0.0 and metrics["b"]["reader_accuracy"] == 0.0 and metrics["b"]["recall_at_1"] == 0.0
    assert [row["answer_rank"] for row in rows["a"]] == [0, 2, None]
    assert rows["b"][0] | {"block_probs": None} == {
        "dataset": "b", "question": "q4", "answers": [r"19\d\d"], "prediction": "July", "score": -0.5,
        "block_ids": [0, 1, 2], "block_probs": None, "exact_match": False, "answer_rank": 1, "num_read": 2,
    }


def test_a_dataset_with_no_answer_read_has_no_reader_accuracy():
    metrics, _ = score_predictions([QAExample("q", ["Oslo"], "a")], [_prediction("q", "Oslo", ["Bergen."])], num_read=1)

    assert metrics["a"]["reader_accuracy"] is None
    assert metrics["a"]["em"] == 1.0 and metrics["a"]["n_answer_read"] == 0
