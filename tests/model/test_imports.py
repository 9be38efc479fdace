import ast
import pathlib
import subprocess
import sys

import pytest

MODEL_DIR = pathlib.Path(__file__).resolve().parents[2] / "model"
# The rooms of realm.model in import order: each may import the shared modules and the rooms before it.
ROOMS = ["networks", "index", "qa", "analysis", "training"]
SHARED = {"tokenization", "publish", "progress"}


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def _room(module: str) -> str:
    """The room (or shared module) of a `realm.model.<x>...` import."""
    return module.split(".")[2]


def test_package_import_does_not_load_torch():
    """Beam workers import realm.model.tokenization and .progress; that must not pull torch in."""
    code = "import sys, realm.model.tokenization, realm.model.publish, realm.model.progress; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_model_never_imports_beam_or_prefect():
    for path in MODEL_DIR.rglob("*.py"):
        for name in _imports(path):
            assert not name.startswith(("apache_beam", "prefect", "realm.flows", "realm.pipelines")), (
                f"{path.relative_to(MODEL_DIR)} imports {name}"
            )


def test_every_module_lives_in_a_room_or_is_shared():
    loose = {p.stem for p in MODEL_DIR.glob("*.py")} - {"__init__"}
    assert loose == SHARED
    assert sorted(p.name for p in MODEL_DIR.iterdir() if (p / "__init__.py").exists()) == sorted(ROOMS)


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_the_shared_modules_and_the_rooms_before_it(room):
    allowed = SHARED | set(ROOMS[: ROOMS.index(room) + 1])
    for path in (MODEL_DIR / room).glob("*.py"):
        for name in _imports(path):
            if name.startswith("realm.model."):
                assert _room(name) in allowed, f"{room}/{path.name} imports {name}"


@pytest.mark.parametrize("shared", sorted(SHARED))
def test_the_shared_modules_import_no_room(shared):
    assert not [name for name in _imports(MODEL_DIR / f"{shared}.py") if name.startswith("realm.model.")]
