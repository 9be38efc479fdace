import json
from pathlib import Path
from typing import get_args

import pytest

import realm.flows.realm_pipeline
from realm.cli import prefect_server
from realm.cli.main import main
from realm.flows.params import ModelPreset, PipelineParams
from realm.schemas.run_layout import RunLayout
from tests.cli.refusal import refused

STAGES = {"prepare", "ict", "pretrain", "warmup", "finetune", "evaluate"}


@pytest.fixture
def nothing_starts(monkeypatch):
    """A Prefect server or the pipeline started fails the test."""

    def started(*args, **kwargs):
        raise AssertionError("realm run started something")

    monkeypatch.setattr(prefect_server, "install", started)
    monkeypatch.setattr(realm.flows.realm_pipeline, "realm_pipeline", started)


def _dry_run(argv: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(["run", "--dry-run", *argv]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_an_unknown_flag_is_refused_by_name_and_nothing_starts(nothing_starts, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--stepz", "5", "--output", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "unrecognized arguments: --stepz 5" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_dry_run_prints_every_stages_settings_as_one_json_line_and_writes_nothing(nothing_starts, tmp_path, capsys):
    output = tmp_path / "x"
    settings = _dry_run(["--preset", "gpu", "--output", str(output)], capsys)
    assert STAGES <= set(settings)
    assert PipelineParams.model_validate(settings) == PipelineParams.preset("gpu", output=str(output))
    assert not output.exists()


def test_param_steps_qa_and_beam_flags_show_in_the_dry_run(nothing_starts, tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "who", "answers": ["me"]}\n')
    settings = _dry_run(["--preset", "tiny", "--output", str(tmp_path / "x"), "--param", "finetune.epochs=2",
                         "--param", "ict.steps=3", "--steps", "7", "--qa", str(questions), "--", "--runner", "R"], capsys)
    assert settings["finetune"]["epochs"] == 2 and settings["ict"]["steps"] == 3 and settings["pretrain"]["steps"] == 7
    assert settings["finetune"]["qa_train"] == [str(questions)] and settings["prepare"]["beam_args"] == ["--runner", "R"]
    assert settings["prepare"]["limit"] == PipelineParams.preset("tiny").prepare.limit  # the rest: the preset's


@pytest.mark.parametrize(
    ("assignment", "message"),
    [("epochs=2", "expected STAGE.FIELD=VALUE with STAGE one of"), ("run.seed=2", "STAGE one of"),
     ("finetune.nope=1", r"'finetune.nope=1': expected finetune.FIELD=VALUE"),
     ("finetune.epochs=abc", "finetune.epochs: Input should be a valid number"),
     # checked across stages, as the Prefect form is
     ("warmup.span_features=false", "warmup and finetune set span_features differently")],
)
def test_a_bad_param_stops_the_run_with_the_stage_field_and_reason(assignment, message, nothing_starts, tmp_path, capsys):
    refused(["run", "--preset", "tiny", "--output", str(tmp_path / "x"), "--param", assignment, "--dry-run"], message, capsys)
    assert not (tmp_path / "x").exists()


def test_a_run_records_its_presets_as_it_starts(monkeypatch, tmp_path, capsys):
    seen = []
    result = {"evaluate": {}, "pretrain": {"accuracy_with_retrieval": 0.0, "accuracy_null_only": 0.0, "examples": 0}}
    monkeypatch.setattr(realm.flows.realm_pipeline, "realm_pipeline", lambda params: seen.append(params) or result)
    model_preset = next(p for p in get_args(ModelPreset) if p != PipelineParams.preset("tiny").run.model_preset)
    output = str(tmp_path / "x")
    assert main(["run", "--preset", "tiny", "--model-preset", model_preset, "--output", output, "--json"]) == 0
    assert (RunLayout.at(output).run_preset(), RunLayout.at(output).model_preset()) == ("tiny", model_preset)
    assert seen[0].run.model_preset == model_preset and Path(output).is_dir()
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["pretrain"]["examples"] == 0


def test_a_users_corpus_and_bert_show_in_the_dry_run(nothing_starts, tmp_path, capsys):
    from tests.bert_fixture import save_tiny_bert

    bert = save_tiny_bert(tmp_path / "bert")
    (tmp_path / "wiki_00").write_text('{"id": "1", "url": "u", "title": "T", "text": "x"}\n')
    settings = _dry_run(["--preset", "tiny", "--output", str(tmp_path / "x"), "--corpus", "wikiextractor",
                         "--input", str(tmp_path / "wiki_*"), "--bert", str(bert)], capsys)
    assert settings["prepare"] | {"beam_args": []} == {"corpus": "wikiextractor", "input": str(tmp_path / "wiki_*"),
                                                      "limit": None, "beam_args": []}
    assert settings["run"]["bert_dir"] == str(bert)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--corpus", "warc"], r"^realm run: prepare: corpus 'warc' needs an input path or glob \(--input\)$"),
    (["--input", "x.jsonl"], r"^realm run: --input needs --corpus KIND"),
    (["--corpus", "vital", "--input", "x"], r"corpus 'vital' is embedded and reads no input"),
    (["--corpus", "warc", "--input", "nowhere/*.warc.gz"], r"^realm run: --input nowhere/\*.warc.gz: no file matches$"),
    (["--bert", "nowhere"], r"^realm run: --bert nowhere: no such directory"),
])
def test_a_corpus_or_bert_that_cannot_run_is_refused_in_one_line(argv, message, nothing_starts, tmp_path, capsys):
    refused(["run", "--preset", "tiny", "--output", str(tmp_path / "x"), *argv, "--dry-run"], message, capsys)


def test_a_run_keeps_its_bert_and_refuses_another(monkeypatch, tmp_path, capsys):
    from tests.bert_fixture import save_tiny_bert

    bert, other = save_tiny_bert(tmp_path / "bert"), save_tiny_bert(tmp_path / "other")
    result = {"evaluate": {}, "pretrain": {"accuracy_with_retrieval": 0.0, "accuracy_null_only": 0.0, "examples": 0, "step": 0},
              "finetune": None, "note": "stopped after pre-training: no questions"}
    seen = []
    monkeypatch.setattr(realm.flows.realm_pipeline, "realm_pipeline", lambda params: seen.append(params) or result)
    monkeypatch.setattr(prefect_server, "install", lambda: None)
    output = str(tmp_path / "x")
    assert main(["run", "--preset", "tiny", "--output", output, "--bert", str(bert)]) == 0
    assert RunLayout.at(output).bert_dir() == str(bert) and seen[0].run.bert_dir == str(bert)
    # The closing output says why the chain stopped, and answers nothing.
    assert capsys.readouterr().out.splitlines()[-1] == "stopped after pre-training: no questions"
    assert main(["run", "--preset", "tiny", "--output", output]) == 0  # the recorded one, unnamed
    assert seen[1].run.bert_dir == str(bert)
    refused(["run", "--output", output, "--bert", str(other), "--dry-run"],
            rf"^realm run: {output} was made with --bert {bert}; pass --bert {bert} or a new --output$", capsys)
