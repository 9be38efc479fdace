"""POST /ask's minimum confidence and its calibrated probability (`realm.cli.http_app`)."""

import pytest
from fastapi.testclient import TestClient

from realm.cli.http_app import create_app
from realm.model.qa.answering import Answerer
from realm.model.qa.calibration import Calibrator

QUESTION = "What is the capital of France?"


def _ask(answerer, **request) -> dict:
    with TestClient(create_app(answerer, "runs/test")) as client:
        response = client.post("/ask", json={"question": QUESTION, **request})
    assert response.status_code == 200, response.text
    return response.json()


def test_below_the_minimum_confidence_the_answer_is_null_and_the_evidence_stays(answerer):
    (expected,) = answerer.answer([QUESTION])
    given = _ask(answerer, min_confidence=expected.probability)
    assert (given["answer"], given["block_id"], given["calibrated"]) == (expected.answer, str(expected.block_id), False)

    withheld = _ask(answerer, min_confidence=min(1.0, expected.probability * 1.01))
    assert (withheld["answer"], withheld["block_id"]) == (None, None)
    assert withheld["probability"] == pytest.approx(expected.probability)
    assert [b["block_id"] for b in withheld["evidence"]] == [b["block_id"] for b in given["evidence"]]
    assert all(b["answer_start"] is None and b["answer_end"] is None for b in withheld["evidence"])


def test_the_probability_returned_is_the_calibrated_one_where_the_run_has_a_calibrator(answerer):
    (raw,) = answerer.answer([QUESTION])
    calibrator = Calibrator(0.5, -1.0)
    calibrated = Answerer(answerer.retriever, answerer.reader, answerer.blocks, answerer.tokenizer,
                          answerer.model_config, answerer.device, calibrator)
    body = _ask(calibrated)
    assert body["calibrated"] is True
    assert body["probability"] == pytest.approx(calibrator.apply(raw.probability))


@pytest.mark.parametrize(("value", "reason"), [(1.5, "less than or equal to 1"), (-0.1, "greater than or equal to 0"),
                                               ("high", "valid number")])
def test_a_minimum_confidence_that_is_not_a_probability_is_refused(answerer, value, reason):
    with TestClient(create_app(answerer, "runs/test")) as client:
        response = client.post("/ask", json={"question": QUESTION, "min_confidence": value})
    assert response.status_code == 422
    assert reason in " ".join(d["msg"] for d in response.json()["detail"])
