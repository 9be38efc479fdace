"""deploy/prefect.yaml points at real flows with parameters they accept."""

import importlib.util
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
        assert deployment["work_pool"]["name"] == "realm-local"


@pytest.mark.parametrize(("deployment", "preset"), [("nightly-tiny", "tiny"), ("demo", "default")])
def test_the_end_to_end_deployments_are_the_run_presets(deployment, preset):
    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (declared,) = [d for d in config["deployments"] if d["name"] == deployment]
    params = PipelineParams.model_validate(declared["parameters"]["params"])
    assert params == PipelineParams.preset(preset, output=params.run.output)


def test_nightly_smoke_deployment_runs_every_night():
    config = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    (nightly,) = [d for d in config["deployments"] if d["name"] == "nightly-tiny"]
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"
