"""Live per-stage counts: taps count what each stage read, wrote and dead-lettered, the status
line shows them, and a runner that is not local gets no taps at all."""

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from realm.model.progress import StatusLine
from realm.pipelines import progress
from realm.pipelines.dead_letters import DEAD_LETTER
from realm.pipelines.progress import StageTaps, read_stage_counts, runs_locally, showing_stage_progress
from tests.progress_fixture import Clock, Stream

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


class _HalveFn(beam.DoFn):
    """Even numbers halved; odd ones dead-lettered."""

    def process(self, number):
        yield number // 2 if number % 2 == 0 else pvalue.TaggedOutput(DEAD_LETTER, number)


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> str:
    """The taps' directory after a two-stage pipeline: `read` writes 0..6 and dead-letters 9 and
    10; `halve` reads 0..6, writes the even ones halved and dead-letters the odd ones."""
    directory = tmp_path_factory.mktemp("progress")
    taps = StageTaps(str(directory))
    with beam.Pipeline(options=PipelineOptions(IN_PROCESS)) as pipeline:
        read = {"numbers": pipeline | "Numbers" >> beam.Create(range(7)), DEAD_LETTER: pipeline | beam.Create([9, 10])}
        halved = taps.entering("halve", read["numbers"]) | beam.ParDo(_HalveFn()).with_outputs(
            DEAD_LETTER, main="halves"
        )
        taps.leaving("read", read)
        taps.leaving("halve", {"halves": halved.halves, DEAD_LETTER: halved[DEAD_LETTER]})
        assert_that(halved.halves, equal_to([0, 1, 2, 3]))  # the input tap passes every element on
    return str(directory)


def test_taps_count_what_each_stage_read_wrote_and_dead_lettered(counted):
    assert read_stage_counts(counted) == {
        "read": {"in": 0, "out": 7, "dead": 2},
        "halve": {"in": 7, "out": 4, "dead": 3},
    }


@pytest.mark.parametrize("terminal, shown", [
    (False, "demo 1m15s | read 7 out, 2 dead | halve 7 in, 4 out, 3 dead\n"),
    (True, "\rdemo 1m15s | read 7 out, 2 dead | halve 7 in, 4 out, 3 dead\n"),
])
def test_the_last_line_shows_the_stages_in_order_with_the_elapsed_time(counted, monkeypatch, terminal, shown):
    monkeypatch.setattr(progress, "POLL_EVERY_S", 3600.0)  # no poll while the block runs: only the last line
    monkeypatch.setenv("COLUMNS", "200")
    clock, stream = Clock(), Stream(terminal)
    with showing_stage_progress("demo", counted, ["read", "halve"], StatusLine(stream, clock)):
        clock.now = 75.0
    assert stream.getvalue() == shown


@pytest.mark.parametrize("argv, local", [
    ([], True),
    (["--runner=DirectRunner"], True),
    (["--runner", "direct"], True),
    (["--runner=DataflowRunner"], False),
    (["--runner=PortableRunner"], False),
])
def test_only_a_local_runner_is_counted(argv, local):
    assert runs_locally(PipelineOptions(argv)) is local


def test_without_a_directory_the_taps_leave_the_pipeline_as_built():
    taps = StageTaps(None)
    pipeline = beam.Pipeline(options=PipelineOptions(IN_PROCESS))
    numbers = pipeline | beam.Create([1])
    assert taps.entering("halve", numbers) is numbers
    taps.leaving("halve", {"numbers": numbers})
    assert not [label for label in pipeline.applied_labels if label.startswith("Count")]
