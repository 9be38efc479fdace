import pytest

from realm.schemas import ArtifactError
from realm.schemas.run_layout import RunLayout


def test_every_artifact_lives_under_the_one_root(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    assert layout.blocks == str(tmp_path / "run" / "blocks")
    assert layout.checkpoints("warmup") == str(tmp_path / "run" / "checkpoints" / "warmup")
    assert layout.predictions == tmp_path / "run" / "predictions"


def test_a_run_root_remembers_its_model_preset_and_refuses_another(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    assert layout.model_preset() is None
    layout.record_model_preset("default")
    layout.record_model_preset("default")
    assert RunLayout.at(tmp_path / "run").model_preset() == "default"
    with pytest.raises(ValueError, match="trained with model preset 'default', not 'tiny'"):
        layout.record_model_preset("tiny")
    layout.record_model_preset("bf16-6l", renamed_from="default")  # the same preset, renamed since
    assert layout.model_preset() == "bf16-6l"


def test_a_run_root_remembers_the_run_preset_it_was_started_with(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    assert layout.run_preset() is None
    layout.record_model_preset("default", run_preset="gpu")
    layout.record_model_preset("default", run_preset="default")  # a later stage's preset: the first stays
    layout.record_model_preset("default")  # as a training flow records it
    assert (layout.model_preset(), layout.run_preset()) == ("default", "gpu")
    (tmp_path / "run" / "run.json").write_text('{"model_preset": "default"}')  # a record from before run presets
    assert layout.run_preset() is None


def test_a_dataset_name_cannot_write_outside_the_run(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    assert layout.predictions_file("nq") == tmp_path / "run" / "predictions" / "nq.parquet"
    for name in ("../../x", "../blocks/part-0", "a/b"):
        with pytest.raises(ValueError, match="outside"):
            layout.predictions_file(name)


@pytest.mark.parametrize(
    "damaged", ['{"model_pre', b"\x9a\x00", '["tiny"]', "{}", '{"model_preset": 3}', '{"model_preset": "a", "run_preset": []}']
)
def test_a_damaged_run_record_is_named(tmp_path, damaged):
    path = tmp_path / "run.json"
    path.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
    with pytest.raises(ArtifactError, match=f"^{path}: not a run record"):
        RunLayout.at(tmp_path).model_preset()


def test_a_run_root_remembers_the_bert_it_starts_from_and_refuses_another(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("bf16-6l", bert_dir="/models/bert")
    layout.record_model_preset("bf16-6l", bert_dir="/models/bert")
    assert layout.bert_dir() == "/models/bert"
    with pytest.raises(ValueError, match="made with --bert /models/bert, not its model preset's own BERT"):
        layout.record_model_preset("bf16-6l")
    plain = RunLayout.at(tmp_path / "plain")
    plain.record_model_preset("bf16-6l")
    assert plain.bert_dir() is None
    with pytest.raises(ValueError, match=r"made with its model preset's own BERT \(no --bert\), not --bert /b"):
        plain.record_model_preset("bf16-6l", bert_dir="/b")


def test_the_prepared_vocabulary_is_read_and_a_damaged_record_named(tmp_path):
    layout = RunLayout.at(tmp_path)
    assert layout.prepared_vocabulary() is None
    layout.vocabulary_file.write_text('{"sha256": "ab", "source": "/m"}')
    assert layout.prepared_vocabulary() == {"sha256": "ab", "source": "/m"}
    layout.vocabulary_file.write_text('{"sha": 1}')
    with pytest.raises(ArtifactError, match="vocabulary.json: not a vocabulary record"):
        layout.prepared_vocabulary()
