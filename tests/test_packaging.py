"""The distribution builds as a wheel whose packages import as realm.<dir>, and layers stay apart."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "realm.schemas", "realm.pipelines", "realm.model", "realm.model.analysis", "realm.flows", "realm.cli", "realm.cli.commands",
]


def test_wheel_installs_and_each_package_imports_from_it(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("realm-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )
    assert not (site / "model").exists() and not (site / "schemas").exists()
    probe = "import importlib, sys\n" + "\n".join(
        f"m = importlib.import_module({name!r}); assert m.__file__.startswith(sys.argv[1]), m.__file__" for name in PACKAGES
    ) + "\nimport realm.pipelines.prepare, realm.cli.main"
    # The question sets the main job trains and evaluates on travel with the wheel.
    probe += (
        "\nfrom realm.flows.demo import evaluation_qa_paths, training_qa_paths"
        "\nassert [p.rsplit('/', 1)[1] for p in training_qa_paths()] == ['ct.train.jsonl', 'nq.train.jsonl', 'wq.train.jsonl']"
        "\nassert [p.rsplit('/', 1)[1] for p in evaluation_qa_paths()] == ['demo_qa.jsonl', 'ct.heldout.jsonl', 'wq.heldout.jsonl']"
        "\nassert all(p.startswith(sys.argv[1]) for p in training_qa_paths() + evaluation_qa_paths())"
    )
    # So does the reader warm-up's SQuAD file, with the README that gives its source and licence.
    probe += (
        "\nfrom realm.flows.reader_warmup import SQUAD_FILE"
        "\nassert str(SQUAD_FILE).startswith(sys.argv[1]) and SQUAD_FILE.is_file() and (SQUAD_FILE.parent / 'README.md').is_file()"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    subprocess.run([sys.executable, "-c", probe, str(site)], check=True, env=env, cwd=tmp_path)


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_schemas_import_pyarrow_only():
    loaded = _modules_after("import realm.schemas")
    assert not loaded & {"apache_beam", "torch", "prefect", "spacy", "transformers"}


def test_pipelines_never_import_torch_or_prefect():
    loaded = _modules_after("import realm.pipelines.prepare, realm.cli.main")
    assert "apache_beam" in loaded
    assert not loaded & {"torch", "prefect", "transformers"}
