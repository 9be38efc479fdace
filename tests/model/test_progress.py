import threading

import pytest

from realm.model.progress import Progress, ProgressBar, StatusLine, format_duration
from tests.progress_fixture import Clock, Stream


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_progress_reports_rate_and_eta_of_this_process_steps():
    clock = Clock(100.0)
    progress = Progress(total_steps=50, start_step=10, clock=clock)
    clock.now = 104.0
    metrics = progress.update(20, loss=1.5)
    assert metrics == {
        "loss": 1.5, "step": 20, "total_steps": 50, "steps_per_s": 2.5, "eta_s": 12.0, "elapsed_s": 4.0,
    }


def test_progress_without_a_total_has_a_rate_and_no_eta():
    clock = Clock()
    progress = Progress(total_steps=None, clock=clock)
    clock.now = 2.0
    assert progress.update(6)["steps_per_s"] == 3.0 and progress.update(6)["eta_s"] is None


@pytest.mark.parametrize("seconds, shown", [(None, "?"), (0, "0m00s"), (187.9, "3m07s"), (3900, "1h05m")])
def test_format_duration(seconds, shown):
    assert format_duration(seconds) == shown


def test_off_a_terminal_a_plain_line_is_written_every_interval_and_at_the_end():
    clock, stream = Clock(), Stream(terminal=False)
    line = StatusLine(stream, clock, log_every_s=10.0)
    for now, text in [(3, "a"), (10, "b"), (15, "c"), (19.9, "d"), (20, "e")]:
        clock.now = now
        line.update(text)
    clock.now = 21
    line.close("done")
    assert stream.getvalue() == "b\ne\ndone\n"


def test_on_a_terminal_one_line_is_redrawn_in_place_and_ended_at_close():
    clock, stream = Clock(), Stream(terminal=True)
    line = StatusLine(stream, clock, redraw_every_s=0.5)
    for now, text in [(0.0, "long text"), (0.2, "skipped"), (0.6, "short")]:
        clock.now = now
        line.update(text)
    line.close("end")
    assert stream.getvalue() == "\rlong text" + "\rshort    " + "\rend  \n"


def test_a_redrawn_line_is_cut_to_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10")
    stream = Stream(terminal=True)
    StatusLine(stream, Clock()).close("abcdefghijklmnop")
    assert stream.getvalue() == "\rabcdefghi\n"


def test_a_line_made_off_the_main_thread_writes_plain_lines_even_on_a_terminal():
    stream = Stream(terminal=True)
    thread = threading.Thread(target=lambda: StatusLine(stream, Clock()).close("refreshed"))
    thread.start()
    thread.join()
    assert stream.getvalue() == "refreshed\n"


def test_a_bar_off_a_terminal_logs_count_share_rate_and_eta_then_a_summary():
    clock, stream = Clock(), Stream(terminal=False)
    with ProgressBar("embedding", 100, "blocks", stream, clock) as bar:
        clock.now = 10.0
        bar.advance(25)
        clock.now = 20.0
        bar.advance(75)
    assert stream.getvalue().splitlines() == [
        "embedding 25/100 blocks (25%), 2.5 blocks/s, ETA 0m30s",
        "embedding 100/100 blocks (100%), 5.0 blocks/s, ETA 0m00s",
        "embedding: 100 blocks in 0m20s, 5.0 blocks/s",
    ]


def test_a_bar_on_a_terminal_draws_the_bar():
    clock, stream = Clock(), Stream(terminal=True)
    bar = ProgressBar("answering", 100, "questions", stream, clock)
    clock.now = 10.0
    bar.advance(25)
    assert stream.getvalue() == "\ranswering [#####...............] 25/100 questions (25%), 2.5 questions/s, ETA 0m30s"


def test_a_bar_without_a_total_shows_count_and_rate():
    clock, stream = Clock(), Stream(terminal=False)
    bar = ProgressBar("reading", None, "items", stream, clock)
    clock.now = 10.0
    bar.advance(30)
    assert stream.getvalue() == "reading 30 items, 3.0 items/s\n"
