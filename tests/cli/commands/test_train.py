from typing import get_args

import pytest

import realm.flows.finetune_openqa
import realm.flows.realm_pretrain
from realm.cli.main import main
from realm.flows.params import ModelPreset, PipelineParams
from realm.schemas.run_layout import RunLayout
from tests.cli.refusal import refused


def test_train_param_overrides_are_typed_like_the_ui_form(monkeypatch, tmp_path, capsys):
    seen = {}
    monkeypatch.setattr(realm.flows.realm_pretrain, "realm_pretrain", lambda run, params: seen.update(params=params) or {})
    main(["train", "pretrain", "--output", str(tmp_path), "--steps", "7",
          "--param", "doc_tower=frozen", "--param", "learning_rate=3e-5", "--param", "eval_every=50"])
    params = seen["params"]
    assert (params.steps, params.doc_tower, params.learning_rate, params.eval_every) == (7, "frozen", 3e-5, 50)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("nope=1", "FIELD one of"), ("eval_every=abc", "valid integer"), ("steps", "expected FIELD=VALUE"),
        # refused before any work, not passed on to fail mid-stage
        ("learning_rate=Infinity", "finite number"), ("eval_every=0", "greater than or equal to 1"),
        ("max_block_wordpieces=1000", "less than or equal to 288"),
    ],
)
def test_bad_train_params_stop_with_the_field_and_the_reason(assignment, message, tmp_path, capsys):
    refused(["train", "pretrain", "--output", str(tmp_path), "--param", assignment], message, capsys)


def test_every_run_and_model_preset_is_offered_and_the_model_preset_overrides_the_run_presets(monkeypatch, tmp_path, capsys):
    from realm.model.networks.config import PRESETS

    assert set(get_args(ModelPreset)) == set(PRESETS)
    seen = {}
    monkeypatch.setattr(
        realm.flows.finetune_openqa, "finetune_openqa", lambda run, params: seen.update(run=run, params=params) or {}
    )
    other = next(p for p in get_args(ModelPreset) if p != PipelineParams.preset("gpu").run.model_preset)
    main(["train", "finetune", "--preset", "gpu", "--model-preset", other, "--output", str(tmp_path)])
    assert seen["run"].model_preset == other and seen["params"].batch_size == 32  # the gpu preset's
    refused(["train", "finetune", "--output", str(tmp_path), "--steps", "10"], "sized in epochs", capsys)
    refused(["train", "ict", "--output", str(tmp_path), "--qa", "q.jsonl"], "^--qa: the ict stage reads no question files",
            capsys)


def test_a_run_goes_on_with_the_presets_it_was_started_with(monkeypatch, tmp_path, capsys):
    seen = []
    monkeypatch.setattr(realm.flows.finetune_openqa, "finetune_openqa", lambda run, params: seen.append((run, params)) or {})
    output = str(tmp_path / "run")
    tiny = PipelineParams.preset("tiny")
    assert main(["train", "finetune", "--preset", "tiny", "--output", output]) == 0
    assert (RunLayout.at(output).run_preset(), RunLayout.at(output).model_preset()) == ("tiny", tiny.run.model_preset)
    assert main(["train", "finetune", "--output", output]) == 0
    assert seen[1] == seen[0] and seen[1][1] == tiny.finetune  # the tiny preset's, though no --preset was given
    # Another run preset with the same model: its settings, this time; the run still remembers tiny.
    assert main(["train", "finetune", "--preset", "gpu", "--model-preset", tiny.run.model_preset, "--output", output]) == 0
    assert seen[2][1].batch_size == 32 and RunLayout.at(output).run_preset() == "tiny"


def test_a_model_preset_the_run_was_not_made_with_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    def trained(run, params):
        raise AssertionError("the stage ran")

    monkeypatch.setattr(realm.flows.finetune_openqa, "finetune_openqa", trained)
    output = tmp_path / "x"
    made_with = PipelineParams.preset("default").run.model_preset
    RunLayout.at(output).record_model_preset(made_with, run_preset="default")
    other = next(p for p in get_args(ModelPreset) if p != made_with)
    expected = f"^realm train: {output} was made with model preset '{made_with}'; pass --model-preset {made_with} or a new --output$"
    refused(["train", "finetune", "--output", str(output), "--model-preset", other], expected, capsys)
    # A run preset whose model is another: the same line (the tiny preset's model is not the default's).
    assert PipelineParams.preset("tiny").run.model_preset != made_with
    refused(["train", "finetune", "--output", str(output), "--preset", "tiny"], expected, capsys)
    assert RunLayout.at(output).model_preset() == made_with


def test_train_starts_from_the_runs_bert_and_refuses_another(monkeypatch, tmp_path, capsys):
    from tests.bert_fixture import save_tiny_bert

    bert, other = save_tiny_bert(tmp_path / "bert"), save_tiny_bert(tmp_path / "other")
    seen = {}
    monkeypatch.setattr(realm.flows.realm_pretrain, "realm_pretrain", lambda run, params: seen.update(run=run) or {})
    output = str(tmp_path / "run")
    assert main(["train", "pretrain", "--output", output, "--preset", "tiny", "--bert", str(bert)]) == 0
    assert seen["run"].bert_dir == str(bert) == RunLayout.at(output).bert_dir()
    assert main(["train", "pretrain", "--output", output]) == 0
    assert seen["run"].bert_dir == str(bert)
    refused(["train", "pretrain", "--output", output, "--bert", str(other)],
            rf"^realm train: {output} was made with --bert {bert}; pass --bert {bert} or a new --output$", capsys)
