"""`realm serve`: a trained run's answers over HTTP, with a web page.

    POST /ask {"question", "num_read"?, "evidence"?, "min_confidence"?}
                                                      -> the answer (null below min_confidence),
                                                         its probability, the top blocks with
                                                         p(z|x) and the answer's character
                                                         offsets in its block
    GET  /blocks/{block_id}                          -> a block's title and text
    GET  /health                                     -> the run, its corpus size, questions answered
                                                         (by the server process that answers)
    GET  /                                           -> a page: ask, see the answer in its evidence

The model and index load once per process. Questions from concurrent requests go through one
queue and are answered in batches by a fixed number of answer threads (`AnswerQueue`; `realm
serve` gives each server process its share of the cores, one thread per core, each on one torch
thread): the CPU runs at most one forward pass per core instead of one per request, and
questions that arrive together share it.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.resources import files

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from realm.cli.answering import EVIDENCE_BLOCKS, NUM_READ
from realm.model.qa.answering import Answerer, Prediction
from realm.model.qa.risk_coverage import MIN_CONFIDENCE, answered

# A question longer than this is not a question (the towers read 64 wordpieces of it anyway).
MAX_QUESTION_CHARS = 500
MAX_BATCH = 16
# A thread that takes a question waits this long for another before it answers what it has, and
# keeps waiting while they keep coming, up to BATCH_WAIT_S in all: clients answered together
# send their next questions within milliseconds of each other, and a batch that leaves without
# them costs every question more (docs/serving.md, "How requests are answered").
BATCH_GAP_S = 0.005
BATCH_WAIT_S = 0.025


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    num_read: int = Field(NUM_READ, ge=1, le=20, description="blocks the reader reads")
    evidence: int = Field(EVIDENCE_BLOCKS, ge=1, le=20, description="retrieved blocks returned")
    min_confidence: float = Field(MIN_CONFIDENCE, ge=0.0, le=1.0, description="no answer below this probability")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, question: str) -> str:
        if not question.strip():
            raise ValueError("the question is blank")
        return question.strip()


class EvidenceBlock(BaseModel):
    block_id: str  # a signed 64-bit id: a string, which JavaScript numbers cannot hold exactly
    title: str
    text: str
    probability: float
    # The answer's offsets in `text` (in the block it was read from), in code points, as Python
    # indexes strings (JavaScript counts UTF-16 units: the page slices `Array.from(text)`).
    answer_start: int | None
    answer_end: int | None


class AskResponse(BaseModel):
    question: str
    answer: str | None  # None: the answer's probability is below the request's min_confidence
    probability: float
    calibrated: bool  # whether `probability` is the run's calibrated one
    block_id: str | None
    evidence: list[EvidenceBlock]


@dataclass
class _Pending:
    question: str
    num_read: int
    num_retrieve: int
    future: Future


class AnswerQueue:
    """`threads` threads answer queued questions, each up to `max_batch` at a time, grouped by
    their read/retrieve sizes; the Answerer is only read, so they share it. A thread's batch is
    the question it took, those already queued, and, while every other thread is busy, those
    that arrive `batch_gap_s` or less apart after it, for `batch_wait_s` at most."""

    def __init__(
        self,
        answerer: Answerer,
        max_batch: int = MAX_BATCH,
        threads: int = 1,
        batch_gap_s: float = BATCH_GAP_S,
        batch_wait_s: float = BATCH_WAIT_S,
    ):
        self.answerer = answerer
        self.max_batch = max_batch
        self.batch_gap_s = batch_gap_s
        self.batch_wait_s = batch_wait_s
        self.answered = 0
        self.largest_batch = 0
        self._counts = threading.Lock()
        self._idle = 0  # threads waiting for a first question
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._work, name=f"realm-answer-queue-{n}", daemon=True) for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, question: str, num_read: int, num_retrieve: int) -> Future:
        future: Future = Future()
        self._queue.put(_Pending(question, num_read, num_retrieve, future))
        return future

    def waiting(self) -> int:
        """Questions queued and not yet taken into a batch."""
        return self._queue.qsize()

    def close(self) -> None:
        for _ in self._threads:  # one stop per worker: each takes one and ends
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def _work(self) -> None:
        while (first := self._next()) is not None:
            batch, stop = self._gather(first)
            self._answer(batch)
            if stop:
                return

    def _next(self) -> _Pending | None:
        with self._counts:
            self._idle += 1
        try:
            return self._queue.get()
        finally:
            with self._counts:
                self._idle -= 1

    def _gather(self, first: _Pending) -> tuple[list[_Pending], bool]:
        """The batch that starts with `first`, and whether a stop was taken into it. It waits for
        more only while no other thread is idle: one that is answers them at once, and two
        batches answered side by side beat one twice their size (a core each)."""
        batch = [first]
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch:
            wait_s = 0.0 if self._idle else max(0.0, min(self.batch_gap_s, deadline - time.monotonic()))
            try:
                item = self._queue.get(timeout=wait_s)
            except queue.Empty:  # none came within the gap (or another thread took it)
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _answer(self, batch: Sequence[_Pending]) -> None:
        with self._counts:
            self.largest_batch = max(self.largest_batch, len(batch))
        groups: dict[tuple[int, int], list[_Pending]] = {}
        for item in batch:
            groups.setdefault((item.num_read, item.num_retrieve), []).append(item)
        for (num_read, num_retrieve), items in groups.items():
            # A request given up (its client's future cancelled) is dropped; the others can no
            # longer be cancelled, so answering them cannot fail on one gone meanwhile.
            items = [item for item in items if item.future.set_running_or_notify_cancel()]
            if not items:
                continue
            try:
                predictions = self.answerer.answer([i.question for i in items], num_read, num_retrieve)
            except Exception as error:  # handed to the requests that asked; the queue serves on
                for item in items:
                    item.future.set_exception(error)
                continue
            with self._counts:
                self.answered += len(items)
            for item, prediction in zip(items, predictions):
                item.future.set_result(prediction)


def _response(prediction: Prediction, evidence: int, min_confidence: float, calibrated: bool) -> AskResponse:
    given = answered(prediction.probability, min_confidence)
    blocks = []
    for block in prediction.evidence[:evidence]:
        offsets = prediction.answer_offsets if given and block.block_id == prediction.block_id else None
        blocks.append(
            EvidenceBlock(
                block_id=str(block.block_id), title=block.title, text=block.text, probability=block.probability,
                answer_start=offsets[0] if offsets else None, answer_end=offsets[1] if offsets else None,
            )
        )
    return AskResponse(
        question=prediction.question, answer=prediction.answer if given else None, probability=prediction.probability,
        calibrated=calibrated, block_id=None if prediction.block_id is None or not given else str(prediction.block_id),
        evidence=blocks,
    )


def create_app(answerer: Answerer, run: str, max_batch: int = MAX_BATCH, threads: int = 1) -> FastAPI:
    answers = AnswerQueue(answerer, max_batch, threads)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        answers.close()

    app = FastAPI(title="realm", description=f"Answers with evidence from the trained run {run}", lifespan=lifespan)
    app.state.answer_queue = answers

    @app.exception_handler(RequestValidationError)
    async def refused(request: Request, error: RequestValidationError) -> Response:
        # FastAPI's own handler echoes the input, and a lone surrogate in it does not encode as
        # UTF-8: the refusal became a 500. ASCII-escaped JSON carries any input.
        body = json.dumps({"detail": jsonable_encoder(error.errors())}, ensure_ascii=True)
        return Response(body, status_code=422, media_type="application/json")
    page = files("realm.cli").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> str:
        return page

    @app.get("/health")
    async def health() -> dict:
        # The figures are this process's: with `realm serve --workers N`, of the worker that answered.
        return {
            "status": "ok", "run": run, "blocks": len(answerer.blocks), "worker_pid": os.getpid(),
            "answered": answers.answered, "largest_batch": answers.largest_batch,
        }

    @app.post("/ask")
    async def ask(request: AskRequest) -> AskResponse:
        if why := answerer.why_unreadable(request.question):
            raise HTTPException(status_code=422, detail=why)
        num_retrieve = max(request.num_read, request.evidence)
        prediction = await asyncio.wrap_future(answers.submit(request.question, request.num_read, num_retrieve))
        return _response(prediction, request.evidence, request.min_confidence, answerer.calibrator is not None)

    @app.get("/blocks/{block_id}")
    async def block(block_id: int) -> dict:
        if block_id not in answerer.blocks:
            raise HTTPException(status_code=404, detail=f"no block {block_id} in this run's corpus")
        return {"block_id": str(block_id), "title": answerer.blocks.title(block_id), "text": answerer.blocks.text(block_id)}

    return app
