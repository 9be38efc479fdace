"""deploy/prefect.yaml points at real flows with parameters they accept."""

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml
from prefect import Flow

from realm.flows.params import PipelineParams

ROOT = Path(__file__).resolve().parents[2]


def load_flow(entrypoint: str) -> Flow:
    path, name = entrypoint.split(":")
    spec = importlib.util.spec_from_file_location(f"deploy_check_{Path(path).stem}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as Prefect's own entrypoint loader does: a dataclass in the
    # module looks its module up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_every_deployment_names_a_flow_and_valid_parameters():
    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    names = [d["name"] for d in config["deployments"]]
    assert len(names) == len(set(names))
    for deployment in config["deployments"]:
        flow = load_flow(deployment["entrypoint"])
        assert isinstance(flow, Flow), deployment["entrypoint"]
        flow.validate_parameters(deployment.get("parameters", {}))
        assert deployment["work_pool"]["name"] in ("realm-local", "gpu")


@pytest.mark.parametrize(("deployment", "preset"), [("nightly-tiny", "tiny"), ("demo", "default"), ("gpu-torchrun", "gpu")])
def test_the_end_to_end_deployments_are_the_run_presets(deployment, preset):
    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (declared,) = [d for d in config["deployments"] if d["name"] == deployment]
    params = PipelineParams.model_validate(declared["parameters"]["params"])
    assert params == PipelineParams.preset(preset, output=params.run.output)


def test_nightly_smoke_deployment_runs_every_night():
    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (nightly,) = [d for d in config["deployments"] if d["name"] == "nightly-tiny"]
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"


def test_the_gpu_deployment_runs_its_flow_run_on_torchrun():
    """The GPU pool's worker runs the flow run through realm.cli.launch: rank 0 executes it, one
    process per GPU (`--nproc`), the command's flags ones the launcher takes."""
    import shlex

    from realm.cli.launch import main as launch_main

    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (gpu,) = [d for d in config["deployments"] if d["name"] == "gpu-torchrun"]
    assert gpu["work_pool"]["name"] == "gpu"
    command = shlex.split(gpu["work_pool"]["job_variables"]["command"])
    assert command[:3] == ["python", "-m", "realm.cli.launch"] and "--nproc" in command
    with pytest.raises(SystemExit) as shown:
        launch_main([*command[3:], "--help"])
    assert shown.value.code == 0
