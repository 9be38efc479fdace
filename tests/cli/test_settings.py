import argparse

import pytest

from realm.cli.settings import pipeline_params
from realm.flows.params import PipelineParams
from realm.schemas.run_layout import RunLayout

TINY, DEFAULT = PipelineParams.preset("tiny").run.model_preset, PipelineParams.preset("default").run.model_preset


def _args(output, preset=None, model_preset=None) -> argparse.Namespace:
    return argparse.Namespace(command="train", output=str(output), preset=preset, model_preset=model_preset, device=None,
                              seed=None)


@pytest.mark.parametrize(
    ("record", "given", "expected"),
    [
        (None, {}, ("default", DEFAULT)),  # a new run: the default preset
        (None, {"preset": "tiny"}, ("tiny", TINY)),
        (None, {"preset": "tiny", "model_preset": DEFAULT}, ("tiny", DEFAULT)),
        (("tiny", TINY), {}, ("tiny", TINY)),  # a run goes on as it was started
        (("tiny", DEFAULT), {}, ("tiny", DEFAULT)),  # ... its model preset too, though not the run preset's
        (("default", DEFAULT), {"preset": "gpu"}, ("gpu", DEFAULT)),  # another preset with the same model
        ((None, TINY), {}, ("default", TINY)),  # a record from before run presets
    ],
)
def test_the_presets_are_the_ones_given_else_the_runs_else_the_defaults(tmp_path, record, given, expected):
    if record is not None:
        run_preset, model_preset = record
        RunLayout.at(tmp_path).record_model_preset(model_preset, run_preset=run_preset)
    params, run_preset = pipeline_params(_args(tmp_path, **given))
    assert (run_preset, params.run.model_preset) == expected
    assert params.finetune == PipelineParams.preset(expected[0]).finetune


def test_a_model_preset_other_than_the_runs_is_refused_naming_the_one_it_was_made_with(tmp_path):
    RunLayout.at(tmp_path).record_model_preset(DEFAULT, run_preset="default")
    with pytest.raises(SystemExit, match=f"^realm train: {tmp_path} was made with model preset '{DEFAULT}'; pass "
                       f"--model-preset {DEFAULT} or a new --output$"):
        pipeline_params(_args(tmp_path, preset="tiny"))


def test_a_run_recorded_under_a_model_presets_old_name_goes_on_under_its_name_now(tmp_path):
    from realm.cli.settings import record_presets
    from realm.model.networks.presets import OLD_MODEL_PRESET_NAMES

    old = next(name for name, now in OLD_MODEL_PRESET_NAMES.items() if now == TINY)
    RunLayout.at(tmp_path).record_model_preset(old)
    params, run_preset = pipeline_params(_args(tmp_path, preset="tiny"))
    assert params.run.model_preset == TINY
    record_presets(params, run_preset)
    assert (RunLayout.at(tmp_path).model_preset(), RunLayout.at(tmp_path).run_preset()) == (TINY, "tiny")
