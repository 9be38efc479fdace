import ast
import pathlib
import subprocess
import sys

MODEL_DIR = pathlib.Path(__file__).resolve().parents[2] / "model"


def test_package_import_does_not_load_torch():
    """Beam workers import realm.model.tokenization; that must not pull torch in."""
    code = "import sys, realm.model.tokenization; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_model_never_imports_beam_or_prefect():
    for path in MODEL_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("apache_beam", "prefect", "realm.flows", "realm.pipelines")), (
                    f"{path.name} imports {name}"
                )
