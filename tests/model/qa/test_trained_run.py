import shutil
from pathlib import Path

import pytest

from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.config import build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.publish import MANIFEST_FILE
from realm.model.qa.trained_run import TrainedRun
from realm.schemas.run_layout import RunLayout


def test_a_run_resolves_to_its_best_checkpoint_and_the_index_it_was_trained_against(tmp_path, qa_corpus, tiny_config):
    blocks, index = qa_corpus  # another root's index, as in a reproduction
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("tiny")
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    root = Path(layout.checkpoints("finetune"))
    save_checkpoint(root, 9, components, extra={"index_path": index})
    best = save_checkpoint(root / "best", 6, components, extra={"index_path": index})

    run = TrainedRun.at(layout.root)
    assert (run.checkpoint, run.index, run.blocks, run.model_preset) == (best, Path(index), layout.blocks, "tiny")
    assert TrainedRun.at(layout.root, checkpoint=root / "9").checkpoint == root / "9"


def test_what_a_run_lacks_is_named(tmp_path, tiny_config):
    layout = RunLayout.at(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="not a trained run"):
        TrainedRun.at(layout.root)
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    save_checkpoint(layout.checkpoints("finetune"), 1, components, extra={"index_path": str(tmp_path / "gone")})
    with pytest.raises(FileNotFoundError, match=r"no published index \(index/ or bm25/\)"):
        TrainedRun.at(layout.root)
    with pytest.raises(FileNotFoundError, match="no run.json"):
        TrainedRun.at(layout.root, index_path=tmp_path / "index")
    assert TrainedRun.at(layout.root, index_path=tmp_path / "index", model_preset="tiny").model_preset == "tiny"


def test_the_index_a_checkpoint_was_trained_against_is_never_swapped_for_another_without_a_word(
    trained_run, tiny_config, caplog
):
    """`trained_run` holds index/0, which its checkpoint records; index/1 is a newer one."""
    recorded = Path(trained_run.index) / "0"
    shutil.copytree(recorded, Path(trained_run.index) / "1")
    (recorded / MANIFEST_FILE).unlink()  # damaged: loading it will name it
    assert TrainedRun.at(trained_run.root).index == recorded
    shutil.rmtree(recorded)  # gone, as in a run moved elsewhere: the newest, said
    assert TrainedRun.at(trained_run.root).index == Path(trained_run.index) / "1"
    assert f"the index it was fine-tuned against, {recorded}, is gone; answering from {Path(trained_run.index) / '1'}" in caplog.text
