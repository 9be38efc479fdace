import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from realm.cli.http_app import MAX_QUESTION_CHARS, create_app
from tests.model.corpus_fixture import CORPUS

QUESTIONS = ["What is the capital of France?", "Who wrote the first algorithm?", "Which river flows into the Mediterranean?"]


@pytest.fixture
def client(answerer):
    with TestClient(create_app(answerer, "runs/test")) as client:
        yield client


def test_an_answer_comes_with_its_evidence_and_its_place_in_the_block_it_was_read_from(client, answerer):
    (expected,) = answerer.answer([QUESTIONS[0]], num_read=3, num_retrieve=4)
    response = client.post("/ask", json={"question": f"  {QUESTIONS[0]} ", "num_read": 3, "evidence": 4})
    assert response.status_code == 200
    body = response.json()
    assert (body["question"], body["answer"], body["block_id"]) == (QUESTIONS[0], expected.answer, str(expected.block_id))
    assert body["probability"] == pytest.approx(expected.probability)
    assert [b["block_id"] for b in body["evidence"]] == [str(e.block_id) for e in expected.evidence[:4]]
    assert [b["probability"] for b in body["evidence"]] == pytest.approx([e.probability for e in expected.evidence[:4]])
    marked = [b for b in body["evidence"] if b["answer_start"] is not None]
    assert [b["block_id"] for b in marked] == [str(expected.block_id)]
    assert marked[0]["text"][marked[0]["answer_start"] : marked[0]["answer_end"]] == expected.answer


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"question": ""}, "at least 1 character"),
        ({"question": "   "}, "the question is blank"),
        ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, f"at most {MAX_QUESTION_CHARS} characters"),
        ({"question": 42}, "valid string"),
        ({"question": "q", "num_read": 0}, "greater than or equal to 1"),
        ({"question": "q", "temperature": 2}, "Extra inputs are not permitted"),
        ({}, "Field required"),
    ],
)
def test_bad_questions_are_refused_with_the_reason(client, payload, reason):
    response = client.post("/ask", json=payload)
    assert response.status_code == 422
    assert reason in " ".join(d["msg"] for d in response.json()["detail"])


def test_a_question_that_is_not_text_or_has_no_word_is_refused(client):
    # A lone surrogate: refused by validation, and the refusal (which echoes it) still encodes.
    response = client.post("/ask", content=b'{"question": "caf\\udce9"}', headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"][0]["input"] == "caf\udce9"
    for question in ("\u200b\u200b", "\u0000", "\u00ad"):  # no wordpiece
        response = client.post("/ask", json={"question": question})
        assert (response.status_code, response.json()) == (422, {"detail": "the question has no word the model reads"})


def test_a_request_given_up_is_dropped_and_the_queue_serves_on(answerer):
    from realm.cli.http_app import AnswerQueue

    started, release = threading.Event(), threading.Event()
    answer = answerer.answer

    def held(questions, *args):
        started.set()
        assert release.wait(timeout=60)
        return answer(questions, *args)

    answerer.answer = held
    answers = AnswerQueue(answerer)
    try:
        first = answers.submit(QUESTIONS[0], 5, 5)
        assert started.wait(timeout=60)  # the worker holds the first; the next two wait in the queue
        given_up, kept = answers.submit(QUESTIONS[1], 5, 5), answers.submit(QUESTIONS[2], 5, 5)
        assert given_up.cancel()
        release.set()
        assert first.result(timeout=60).question == QUESTIONS[0]
        assert kept.result(timeout=60).question == QUESTIONS[2]
        assert answers.submit(QUESTIONS[0], 5, 5).result(timeout=60).question == QUESTIONS[0]  # still serving
    finally:
        release.set()
        answers.close()
    assert answers.answered == 3


def test_blocks_health_and_the_page(client):
    block_id, title, text = CORPUS[3]
    assert client.get(f"/blocks/{block_id}").json() == {"block_id": str(block_id), "title": title, "text": text}
    missing = client.get("/blocks/12345")
    assert missing.status_code == 404 and missing.json()["detail"] == "no block 12345 in this run's corpus"
    assert client.get("/health").json() == {
        "status": "ok", "run": "runs/test", "blocks": len(CORPUS), "worker_pid": os.getpid(), "answered": 0,
        "largest_batch": 0,
    }
    page = client.get("/")
    assert page.status_code == 200 and '<form id="ask">' in page.text and 'fetch("ask"' in page.text


def test_concurrent_questions_are_answered_in_batches_with_the_answers_asked_alone(answerer):
    """32 clients at once: the first batch holds the worker until every other question is
    queued, so the rest go through in full batches of 16; every client gets what it would alone."""
    alone = {q: p.answer for q, p in zip(QUESTIONS, answerer.answer(QUESTIONS, num_read=5, num_retrieve=5))}
    held, queued = threading.Event(), threading.Event()
    first_batch: list[int] = []
    answer = answerer.answer

    def held_first(questions, *args):
        if not held.is_set():
            first_batch.append(len(questions))
            held.set()
            assert queued.wait(timeout=60), "the other questions never arrived in the queue"
        return answer(questions, *args)

    answerer.answer = held_first
    asked = [QUESTIONS[i % len(QUESTIONS)] for i in range(32)]
    with TestClient(create_app(answerer, "runs/test")) as client:
        with ThreadPoolExecutor(max_workers=32) as pool:
            futures = [pool.submit(client.post, "/ask", json={"question": q}) for q in asked]
            # The worker may take more than one question into its first batch before it blocks.
            assert held.wait(timeout=60)
            deadline = time.monotonic() + 60
            while client.app.state.answer_queue.waiting() < 32 - first_batch[0]:
                assert time.monotonic() < deadline, "the questions were not all queued within 60 s"
                time.sleep(0.01)
            queued.set()
            responses = [f.result(timeout=120) for f in futures]
        health = client.get("/health").json()
    assert [r.status_code for r in responses] == [200] * 32
    assert [r.json()["answer"] for r in responses] == [alone[q] for q in asked]
    assert health["answered"] == 32
    assert health["largest_batch"] == 16


def test_two_threads_share_the_queue_and_each_client_gets_the_answer_it_gets_alone(answerer):
    alone = {q: p.answer for q, p in zip(QUESTIONS, answerer.answer(QUESTIONS, num_read=5, num_retrieve=5))}
    asked = [QUESTIONS[i % len(QUESTIONS)] for i in range(32)]
    with TestClient(create_app(answerer, "runs/test", threads=2)) as client:
        answering = {thread.name for thread in threading.enumerate() if thread.name.startswith("realm-answer-queue")}
        with ThreadPoolExecutor(max_workers=32) as pool:
            responses = list(pool.map(lambda q: client.post("/ask", json={"question": q}), asked))
        health = client.get("/health").json()
    assert len(answering) == 2
    assert [r.status_code for r in responses] == [200] * 32
    assert [r.json()["answer"] for r in responses] == [alone[q] for q in asked]
    assert health["answered"] == 32
    assert not any(thread.name.startswith("realm-answer-queue") for thread in threading.enumerate())  # closed: both ended


def _batch_sizes(answerer, gap_s: float, wait_s: float, arrivals_s: list[float]) -> list[int]:
    """The batches an idle AnswerQueue answers when questions arrive at `arrivals_s` (seconds
    after the first)."""
    from realm.cli.http_app import AnswerQueue

    sizes = []
    answer = answerer.answer

    def counted(questions, *args):
        sizes.append(len(questions))
        return answer(questions, *args)

    answerer.answer = counted
    answers = AnswerQueue(answerer, batch_gap_s=gap_s, batch_wait_s=wait_s)
    try:
        started, futures = time.monotonic(), []
        for n, arrival in enumerate(arrivals_s):
            time.sleep(max(0.0, started + arrival - time.monotonic()))
            futures.append(answers.submit(QUESTIONS[n % len(QUESTIONS)], 5, 5))
        assert [f.result(timeout=60).question for f in futures] == [QUESTIONS[n % len(QUESTIONS)] for n in range(len(futures))]
    finally:
        answers.close()
    return sizes


def test_questions_that_keep_arriving_within_the_gap_share_a_batch(answerer):
    assert _batch_sizes(answerer, gap_s=2.0, wait_s=10.0, arrivals_s=[0.0, 0.5, 1.0]) == [3]


def test_a_question_later_than_the_gap_waits_for_the_next_batch(answerer):
    assert _batch_sizes(answerer, gap_s=0.2, wait_s=10.0, arrivals_s=[0.0, 1.5]) == [1, 1]


def test_a_batch_waits_no_longer_than_its_wait(answerer):
    # Each arrival is within the gap of the one before, but the third comes after the wait.
    assert _batch_sizes(answerer, gap_s=2.0, wait_s=1.0, arrivals_s=[0.0, 0.5, 1.6]) == [2, 1]
