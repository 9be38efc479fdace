"""The doc-tower model handler: a tower on a remote file system is loaded from a local copy that
is gone once it has loaded; a local tower is loaded where it lies; a worker process's heap is
frozen out of the collector's sight once the tower has loaded, a launching process's is not."""

import gc

import pytest
import torch
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem

from realm.model.networks.config import build_component, load_pretrained
from realm.model.networks.retriever import Embedder
from realm.pipelines.embed_handler import HARNESS_ENVIRONMENT_VARIABLE, DocTowerHandler

STAND_IN = "standin://"


def _local(path: str) -> str:
    return path.removeprefix(STAND_IN)


class StandInFileSystem(LocalFileSystem):
    """A remote store as the handler meets one (`standin:///dir/file`, as `gs://bucket/file`):
    its files lie on this disk, but only Beam's FileSystems reach them by that name."""

    @classmethod
    def scheme(cls):
        return "standin"

    def exists(self, path):
        return super().exists(_local(path))

    def _list(self, dir_or_prefix):
        for found in super()._list(_local(dir_or_prefix)):
            yield FileMetadata(STAND_IN + found.path, found.size_in_bytes, found.last_updated_in_seconds)

    def _path_open(self, path, mode, *args, **kwargs):
        return super()._path_open(_local(path), mode, *args, **kwargs)


def saved_tower(directory, config):
    torch.manual_seed(1)
    build_component(Embedder, config).save_pretrained(directory)
    return load_pretrained(Embedder, directory)


def handler_of(directory: str, tokenizer) -> DocTowerHandler:
    return DocTowerHandler(directory, tokenizer, False, max_block_wordpieces=16, batch_blocks=3, window_blocks=4,
                           torch_threads=None)


def same_weights(a, b) -> bool:
    return a.state_dict().keys() == b.state_dict().keys() and all(
        torch.equal(a.state_dict()[name], b.state_dict()[name]) for name in a.state_dict()
    )


def test_a_remote_towers_local_copy_is_deleted_once_it_has_loaded(tmp_path, tiny_config, tokenizer):
    # The pipeline tests' fixture makes tmp_path the temp folder, where the copy is made.
    expected = saved_tower(tmp_path / "snapshot", tiny_config)
    loaded = handler_of(f"{STAND_IN}{tmp_path / 'snapshot'}", tokenizer).load_model()
    assert same_weights(loaded, expected)
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot"]


def test_a_local_tower_is_loaded_where_it_lies_and_kept(tmp_path, tiny_config, tokenizer):
    expected = saved_tower(tmp_path / "snapshot", tiny_config)
    files = sorted(p.name for p in (tmp_path / "snapshot").iterdir())
    loaded = handler_of(str(tmp_path / "snapshot"), tokenizer).load_model()
    assert same_weights(loaded, expected)
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot"]
    assert sorted(p.name for p in (tmp_path / "snapshot").iterdir()) == files == ["config.json", "model.safetensors"]


@pytest.fixture
def unfrozen():
    """The collector as a test process has it: nothing frozen before, everything thawed after."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_only_a_worker_process_freezes_what_it_holds_once_the_tower_has_loaded(
    tmp_path, tiny_config, tokenizer, monkeypatch, unfrozen
):
    saved_tower(tmp_path / "snapshot", tiny_config)
    handler = handler_of(str(tmp_path / "snapshot"), tokenizer)
    monkeypatch.delenv(HARNESS_ENVIRONMENT_VARIABLE, raising=False)
    handler.load_model()
    assert gc.get_freeze_count() == 0  # a process that launches a pipeline and runs its handler itself
    monkeypatch.setenv(HARNESS_ENVIRONMENT_VARIABLE, "url: 'localhost:1'")  # as a Beam SDK harness has it
    tower = handler.load_model()
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(tower) and not any(tower is o for o in gc.get_objects())  # frozen, not dropped
