"""Fault injection: each kind of file of a trained tiny run truncated, corrupted or deleted,
then the command that reads it. Allowed outcomes: a one-line error naming the file (or the
step directory holding it) and a non-zero exit; a warning naming it and a fallback; or the
undamaged run's own output (the damage cost nothing). Anything else (a traceback, an error
that names no file, an answer that differs without a warning) fails the test."""

import logging
import os
import re
import shutil
from pathlib import Path

import pytest

from realm.cli.main import main
from realm.flows.demo import demo_qa_path
from realm.model.publish import file_sha256

QUESTION = "who was the commander of apollo 11"
EVALUATE = ["evaluate", "--qa", str(demo_qa_path())]

# (kind, the file damaged, relative to the run root, the command that reads it). The run's
# corpus is the in-process runner's one shard: the pipeline prepared the same rows again and
# left it as it was.
TARGETS = [
    ("blocks shard", "blocks/prepare-00000-of-00001.parquet", ["ask", QUESTION]),
    ("blocks shard", "blocks/prepare-00000-of-00001.parquet", EVALUATE),
    ("block entities shard", "block_entities/prepare-00000-of-00001.parquet", ["ask", QUESTION]),
    ("faiss index", "index/6/index.faiss", ["ask", QUESTION]),
    ("faiss index", "index/6/index.faiss", EVALUATE),
    ("index block ids", "index/6/block_ids.npy", ["ask", QUESTION]),
    ("index manifest", "index/6/manifest.json", ["ask", QUESTION]),
    ("reader weights", "checkpoints/finetune/best/2/reader/model.safetensors", ["ask", QUESTION]),
    ("reader weights", "checkpoints/finetune/best/2/reader/model.safetensors", EVALUATE),
    ("query tower weights", "checkpoints/finetune/best/2/query_embedder/model.safetensors", ["ask", QUESTION]),
    ("checkpoint manifest", "checkpoints/finetune/best/2/manifest.json", ["ask", QUESTION]),
    ("run record", "run.json", ["ask", QUESTION]),
    ("embeddings", "corpora/again/embeddings/0/part-00000.parquet", ["index", "--corpus", "{run}", "--name", "again"]),
    ("predictions", "predictions/demo.parquet", ["compare"]),  # the run alone: naming it twice is refused
    ("masked-span outcomes", "masked_spans/held_out.parquet", ["compare"]),
]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def corrupt(path: Path) -> None:
    """64 bytes in the middle of the file inverted: a flipped region, the size unchanged."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    path.write_bytes(bytes(data))


def delete(path: Path) -> None:
    path.unlink()


FAULTS = {"truncated": truncate, "corrupted": corrupt, "deleted": delete}


def _link_or_copy(source: str, target: str) -> None:
    """Checkpoint weights and training state are never rewritten in place (a step is published
    by rename), so copies of the run may share them; everything else is copied."""
    if source.endswith((".safetensors", ".pt")):
        os.link(source, target)
    else:
        shutil.copy2(source, target)


@pytest.fixture(scope="module")
def copy_at(tmp_path_factory) -> Path:
    """Where every test's copy of the run lives: one place, so commands print the same paths."""
    return tmp_path_factory.mktemp("copy") / "run"


@pytest.fixture
def fresh_run(trained_tiny_run, copy_at):
    """A copy of the trained run, removed after the test."""
    yield Path(shutil.copytree(trained_tiny_run, copy_at, copy_function=_link_or_copy))
    shutil.rmtree(copy_at)


def _command(run: Path, argv: list[str]) -> list[str]:
    argv = [part.replace("{run}", str(run)) for part in argv]
    return [argv[0], str(run), *argv[1:]] if argv[0] == "compare" else [argv[0], "--run", str(run), *argv[1:]]


def _products(run: Path) -> dict[str, str]:
    """What a command leaves besides its output: the newest index of corpus "again" (`realm index`)."""
    newest = max((run / "corpora" / "again" / "index").iterdir(), key=lambda path: path.name)
    return {"again vectors": file_sha256(newest / "vectors.npy")}


def _outcome(run: Path, argv: list[str], capsys, caplog) -> tuple[int, str, str, list[str], dict]:
    """(exit code, stdout with timings masked, stderr, warnings logged, products)."""
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        try:
            code = main(_command(run, argv))
        except SystemExit as stop:  # argparse's own exits, with their code
            code = stop.code
    captured = capsys.readouterr()
    out = re.sub(r"in \d+ s", "in N s", captured.out)
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    return code, out, captured.err, warnings, _products(run)


@pytest.fixture(scope="module")
def undamaged_outcomes() -> dict:
    """Each command's outcome on an undamaged copy of the run, filled by the first test that runs it."""
    return {}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize(("kind", "relative", "argv"), TARGETS, ids=[f"{kind}, {argv[0]}" for kind, _, argv in TARGETS])
def test_a_damaged_file_is_named_or_costs_nothing(
    trained_tiny_run, fresh_run, undamaged_outcomes, capsys, caplog, kind, relative, argv, fault
):
    if tuple(argv) not in undamaged_outcomes:
        undamaged_outcomes[tuple(argv)] = _outcome(fresh_run, argv, capsys, caplog)
        shutil.rmtree(fresh_run)  # what the command wrote goes; the test's copy starts afresh
        shutil.copytree(trained_tiny_run, fresh_run, copy_function=_link_or_copy)
    expected_code, expected_out, _, expected_warnings, expected_products = undamaged_outcomes[tuple(argv)]
    assert expected_code == 0

    damaged = fresh_run / relative
    if damaged.stat().st_nlink > 1:  # shared with the kept run: damage a copy of its own
        own = damaged.with_name(damaged.name + ".own")
        shutil.copy2(damaged, own)
        os.replace(own, damaged)
    FAULTS[fault](damaged)
    code, out, err, warnings, products = _outcome(fresh_run, argv, capsys, caplog)

    names = (str(damaged), str(damaged.parent))
    if code != 0:
        assert err.count("\n") == 1 and any(name in err for name in names), f"{kind} {fault}: exit {code}, stderr {err!r}"
    elif not any(name in warning for warning in warnings for name in names):  # else a fallback, said
        assert (out, warnings, products) == (expected_out, expected_warnings, expected_products), (
            f"{kind} {fault}: another outcome and no warning naming the file"
        )
