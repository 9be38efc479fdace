import inspect
import json
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

from prefect import flow, task

import realm.flows.caching
from realm.flows.caching import CACHE_DIR, PREPARE_MODULES, REALM_PACKAGES, cached_in_run, source_digest
from realm.model.training.stage_inputs import json_digest
from realm.schemas.run_layout import RunLayout

CALLS = []


@task(name="count-words")
def count_words(text: str, scale: int) -> dict:
    CALLS.append(text)
    return {"words": len(text.split()) * scale, "text": text}


@flow
def counting_flow(root: str, text: str, scale: int = 1, code: str | None = None) -> dict:
    return cached_in_run(count_words, RunLayout.at(root), code=code)(text, scale)


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


def test_a_stage_keyed_on_realms_code_runs_again_when_it_changed_and_says_so(tmp_path, monkeypatch, caplog):
    CALLS.clear()
    counting_flow(str(tmp_path / "evaluation"), "a b", code="realm")
    counting_flow(str(tmp_path / "training"), "a b")
    counting_flow(str(tmp_path / "evaluation"), "a b", code="realm")
    assert CALLS == ["a b", "a b"]
    monkeypatch.setitem(realm.flows.caching.CODE_DIGESTS, "realm", "0" * 64)  # the reader's code edited, say
    caplog.clear()
    assert counting_flow(str(tmp_path / "evaluation"), "a b", code="realm") == {"words": 2, "text": "a b"}
    assert CALLS == ["a b", "a b", "a b"]
    assert "count-words: its code changed since its last cached run; running the stage again" in caplog.messages
    counting_flow(str(tmp_path / "evaluation"), "a b", code="realm")
    counting_flow(str(tmp_path / "training"), "a b")  # keyed on its task's source alone: still done
    assert CALLS == ["a b", "a b", "a b"]


def test_a_stage_keyed_on_its_task_alone_keeps_the_results_cached_before_realm_keyed_any_on_code(tmp_path):
    CALLS.clear()
    # The key as every stage had it before any was keyed on code: the task's source, its arguments, its reads.
    key = json_digest([inspect.getsource(count_words.fn), [["c d", 1], {}], {}])[:32]
    entry = {"result": {"words": 5, "text": "cached"}, "writes": {}, "reads": {}}
    (tmp_path / CACHE_DIR).mkdir()
    (tmp_path / CACHE_DIR / f"count-words-{key}.json").write_text(json.dumps(entry))
    assert counting_flow(str(tmp_path), "c d") == {"words": 5, "text": "cached"}
    assert CALLS == []
    assert counting_flow(str(tmp_path), "c d", code="realm") == {"words": 2, "text": "c d"}  # keyed on code: a miss
    assert CALLS == ["c d"]


def test_the_code_digest_covers_every_python_file_of_realms_packages(tmp_path, monkeypatch):
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert set(REALM_PACKAGES) == {p for p in pyproject["tool"]["setuptools"]["packages"] if p.count(".") == 1}
    package = tmp_path / "digested"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "reader.py").write_text("SPAN = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source_digest(["digested"])
    (package / "notes.txt").write_text("not code")
    assert source_digest(["digested"]) == before
    module = source_digest(["digested.inner.reader"])  # one module, not its package
    (package / "inner" / "other.py").write_text("OTHER = 1\n")
    assert source_digest(["digested.inner.reader"]) == module
    (package / "inner" / "reader.py").write_text("SPAN = 2\n")  # a module two levels down
    assert source_digest(["digested"]) != before
    assert source_digest(["digested.inner.reader"]) != module


def test_the_preparation_is_keyed_on_every_module_of_realm_its_pipelines_import():
    """A module the pipelines import and PREPARE_MODULES leaves out could change the prepared
    rows without preparing again (its parent packages hold docstrings alone). The embedding
    pipeline is not preparation: `realm prepare` never runs it, and what it writes is keyed by
    its index lineage."""
    listing = (
        "import importlib, pkgutil, sys; import realm.pipelines as p; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(p.__path__, 'realm.pipelines.') "
        "if not m.name.startswith('realm.pipelines.embed')]; "
        "print(' '.join(m for m in sys.modules if m.startswith('realm')))"
    )
    loaded = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout.split()
    covered = [m for m in loaded if any(m == name or m.startswith(name + ".") for name in PREPARE_MODULES)]
    assert "realm.pipelines.prepare" in covered and "realm.model.tokenization" in covered
    assert set(loaded) - set(covered) == {"realm", "realm.model"}
