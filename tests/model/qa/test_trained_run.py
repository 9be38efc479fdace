from pathlib import Path

import pytest

from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.config import build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
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
