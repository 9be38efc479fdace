import json
import pickle

from prefect import flow, task

from realm.flows.caching import CACHE_DIR, cached_in_run
from realm.schemas.run_layout import RunLayout

CALLS = []


@task(name="count-words")
def count_words(text: str, scale: int) -> dict:
    CALLS.append(text)
    return {"words": len(text.split()) * scale, "text": text}


@flow
def counting_flow(root: str, text: str, scale: int = 1) -> dict:
    return cached_in_run(count_words, RunLayout.at(root))(text, scale)


class WritesAMarker:
    """A pickle that, if ever loaded, creates a file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_stage_runs_once_per_inputs_and_its_result_is_plain_json(tmp_path):
    CALLS.clear()
    first = counting_flow(str(tmp_path), "a b c", 2)
    assert counting_flow(str(tmp_path), "a b c", 2) == first == {"words": 6, "text": "a b c"}
    assert CALLS == ["a b c"]
    assert counting_flow(str(tmp_path), "a b c", 3) == {"words": 9, "text": "a b c"}
    assert CALLS == ["a b c", "a b c"]
    entries = sorted((tmp_path / CACHE_DIR).iterdir())
    assert [json.loads(p.read_text())["result"] for p in entries] in (
        [{"words": 6, "text": "a b c"}, {"words": 9, "text": "a b c"}],
        [{"words": 9, "text": "a b c"}, {"words": 6, "text": "a b c"}],
    )
    assert not (tmp_path / ".prefect").exists()  # no Prefect result (a pickle) is persisted in the run


def test_a_crafted_pickle_where_a_result_lives_is_never_loaded(tmp_path):
    CALLS.clear()
    counting_flow(str(tmp_path), "x y")
    (entry,) = (tmp_path / CACHE_DIR).iterdir()
    marker = tmp_path / "pwned"
    entry.write_bytes(pickle.dumps(WritesAMarker(marker)))

    assert counting_flow(str(tmp_path), "x y") == {"words": 2, "text": "x y"}
    assert not marker.exists()
    assert CALLS == ["x y", "x y"]  # the stage ran again
    assert json.loads(entry.read_text())["result"] == {"words": 2, "text": "x y"}
