"""The web page of `realm serve`, driven in a real browser: Debian's chromium through
Playwright (its own browser download is unreachable here). Skipped, naming what is missing,
where either is not installed."""

import shutil
import socket
import threading
import time

import pytest
import uvicorn

from realm.cli.http_app import create_app

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
QUESTION = "What is the capital of France?"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser on PATH (apt-get install chromium)")


@pytest.fixture
def served(answerer):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(answerer, "runs/test"), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(timeout=30)


def test_a_question_typed_into_the_page_shows_the_answer_marked_in_its_block(served, answerer):
    (expected,) = answerer.answer([QUESTION], num_read=5, num_retrieve=5)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(served)
            page.fill("#question", QUESTION)
            page.click("#submit")
            page.wait_for_selector("#answer strong")
            assert page.inner_text("#answer strong") == expected.answer
            assert page.locator(".block").count() == 5
            read = page.locator(".block.read")
            assert read.count() == 1 and read.locator("mark").inner_text() == expected.answer
            assert read.locator("h3 span").inner_text() == answerer.blocks.title(expected.block_id)

            page.fill("#question", "   ")
            page.click("#submit")
            page.wait_for_function("document.getElementById('error').textContent.length > 0")
            assert "the question is blank" in page.inner_text("#error")

            # The API's offsets count code points: characters outside the BMP before the answer
            # (two UTF-16 units each in JavaScript) must not shift the mark.
            text = "Emoji \U0001F600\U0001F600 then Paris is the capital."
            start = text.index("Paris")
            block = {"block_id": "1", "title": "T", "text": text, "probability": 1.0,
                     "answer_start": start, "answer_end": start + len("Paris")}
            page.route("**/ask", lambda route: route.fulfill(json={
                "question": "q", "answer": "Paris", "probability": 0.5, "block_id": "1", "evidence": [block]}))
            page.fill("#question", "which city?")
            page.click("#submit")
            page.wait_for_function("document.querySelector('#answer strong').textContent === 'Paris'")
            assert page.locator(".block.read mark").inner_text() == "Paris"
        finally:
            browser.close()
