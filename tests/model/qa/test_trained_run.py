import shutil
from pathlib import Path

import numpy as np
import pytest

from realm.model.index.mips import MipsIndex
from realm.model.networks.checkpoint import WEIGHT_AVERAGE_EXTRA, save_checkpoint
from realm.model.networks.config import build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.publish import MANIFEST_FILE
from realm.model.qa.trained_run import TrainedRun
from realm.model.training.weight_average import WeightAverage
from realm.schemas.run_layout import RunLayout


def test_a_run_resolves_to_its_best_checkpoint_and_the_index_it_was_trained_against(tmp_path, qa_corpus, tiny_config):
    blocks, index = qa_corpus  # another root's index, as in a reproduction
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("random-2l")
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    root = Path(layout.checkpoints("finetune"))
    save_checkpoint(root, 9, components, extra={"index_path": index})
    best = save_checkpoint(root / "best", 6, components, extra={"index_path": index})

    run = TrainedRun.at(layout.root)
    assert (run.checkpoint, run.index, run.blocks, run.model_preset) == (best, Path(index), layout.blocks, "random-2l")
    assert TrainedRun.at(layout.root, checkpoint=root / "9").checkpoint == root / "9"


def test_a_run_that_published_its_weight_average_never_answers_with_the_trained_weights(
    tmp_path, qa_corpus, tiny_config
):
    _, index = qa_corpus
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("random-2l")
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    root = Path(layout.checkpoints("finetune"))
    average = WeightAverage(components)
    save_checkpoint(root, 4, components, extra={WEIGHT_AVERAGE_EXTRA: average.state_dict()}, paths={"index": index})
    best = save_checkpoint(root / "best", 2, components, paths={"index": index})
    assert TrainedRun.at(layout.root).checkpoint == best

    (best / "reader" / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=rf"^{best}/reader/model.safetensors: size 0, .*; this run publishes the moving average"):
        TrainedRun.at(layout.root)
    shutil.rmtree(best)
    with pytest.raises(FileNotFoundError, match=r"best: no checkpoint; .* \(its step checkpoints, .*/4 the newest"):
        TrainedRun.at(layout.root)
    assert TrainedRun.at(layout.root, checkpoint=root / "4").checkpoint == root / "4"  # asked for by name


def test_what_a_run_lacks_is_named(tmp_path, tiny_config):
    layout = RunLayout.at(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match=rf"^{layout.root}: no such directory$"):
        TrainedRun.at(layout.root)
    layout.root.mkdir()
    with pytest.raises(FileNotFoundError, match="not a trained run"):
        TrainedRun.at(layout.root)
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    save_checkpoint(layout.checkpoints("finetune"), 1, components)  # records no index
    with pytest.raises(FileNotFoundError, match=r"no published index \(index/ or bm25/\)"):
        TrainedRun.at(layout.root)
    with pytest.raises(FileNotFoundError, match="no run.json"):
        TrainedRun.at(layout.root, index_path=tmp_path / "index")
    assert TrainedRun.at(layout.root, index_path=tmp_path / "index", model_preset="random-2l").model_preset == "random-2l"


def _run_trained_against_its_own_index(root: Path, tiny_config) -> tuple[RunLayout, Path]:
    layout = RunLayout.at(root)
    layout.record_model_preset("random-2l")
    index = MipsIndex.build(np.eye(3, 128, dtype=np.float32), np.array([1, 2, 3])).save(layout.index, 5)
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    save_checkpoint(layout.checkpoints("finetune"), 9, components, paths={"index": index})
    return layout, index


def test_a_run_folder_moved_elsewhere_answers_with_the_index_inside_the_copy(tmp_path, tiny_config):
    layout, _ = _run_trained_against_its_own_index(tmp_path / "run", tiny_config)
    shutil.copytree(layout.root, tmp_path / "moved")
    shutil.rmtree(layout.root)
    run = TrainedRun.at(tmp_path / "moved")
    assert (run.checkpoint, run.index) == (tmp_path / "moved/checkpoints/finetune/9", tmp_path / "moved/index/5")


def test_the_index_a_checkpoint_was_trained_against_is_never_swapped_for_another(tmp_path, tiny_config):
    layout, index = _run_trained_against_its_own_index(tmp_path / "run", tiny_config)
    MipsIndex.build(np.eye(3, 128, dtype=np.float32), np.array([1, 2, 3])).save(layout.index, 7)  # a newer one
    (index / MANIFEST_FILE).unlink()  # damaged: loading it will name it
    assert TrainedRun.at(layout.root).index == index
    shutil.rmtree(index)  # gone: an error naming its step and path
    with pytest.raises(FileNotFoundError, match=f"against the index of step 5 \\({index}\\), which is not there"):
        TrainedRun.at(layout.root)
