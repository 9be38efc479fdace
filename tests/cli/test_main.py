import pytest

import realm.flows.realm_pretrain
from realm.cli.main import main


def test_train_param_overrides_are_typed_like_the_ui_form(monkeypatch, tmp_path, capsys):
    seen = {}
    monkeypatch.setattr(realm.flows.realm_pretrain, "realm_pretrain", lambda run, params: seen.update(params=params) or {})
    main(["train", "pretrain", "--output", str(tmp_path), "--steps", "7",
          "--param", "cached_doc_embeddings=true", "--param", "learning_rate=3e-5", "--param", "eval_every=50"])
    params = seen["params"]
    assert (params.steps, params.cached_doc_embeddings, params.learning_rate, params.eval_every) == (7, True, 3e-5, 50)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [("nope=1", "FIELD one of"), ("eval_every=abc", "valid integer"), ("steps", "expected FIELD=VALUE")],
)
def test_bad_train_params_stop_with_the_field_and_the_reason(assignment, message, tmp_path):
    with pytest.raises(SystemExit, match=message):
        main(["train", "pretrain", "--output", str(tmp_path), "--param", assignment])


def test_every_run_and_model_preset_is_offered_and_the_model_preset_overrides_the_run_presets(monkeypatch, tmp_path):
    from typing import get_args

    import realm.flows.finetune_openqa
    from realm.flows.params import ModelPreset
    from realm.model.networks.config import PRESETS

    assert set(get_args(ModelPreset)) == set(PRESETS)
    seen = {}
    monkeypatch.setattr(
        realm.flows.finetune_openqa, "finetune_openqa", lambda run, params: seen.update(run=run, params=params) or {}
    )
    main(["train", "finetune", "--preset", "gpu", "--model_preset", "fast", "--output", str(tmp_path)])
    assert seen["run"].model_preset == "fast" and seen["params"].batch_size == 32  # the gpu preset's
    with pytest.raises(SystemExit, match="sized in epochs"):
        main(["train", "finetune", "--output", str(tmp_path), "--steps", "10"])


def test_what_a_user_can_fix_is_one_line_and_a_non_zero_exit(tmp_path, capsys):
    assert main(["ask", "--run", str(tmp_path / "nowhere"), "who was the commander of apollo 11"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a trained run" in err and "Traceback" not in err
    with pytest.raises(SystemExit, match="the question is empty"):
        main(["ask", "--run", str(tmp_path), "   "])
    with pytest.raises(FileNotFoundError, match="not a trained run"):
        main(["--debug", "ask", "--run", str(tmp_path / "nowhere"), "who"])
    missing = str(tmp_path / "dumps" / "*.xml")
    assert main(["prepare", "--corpus", "wikipedia-xml", "--input", missing, "--output", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"realm prepare: --input {missing}: no file matches it; {tmp_path / 'run'} is unchanged\n"
    )
