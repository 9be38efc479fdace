"""bm25s runs a JAX computation when imported wherever JAX is installed; on a CUDA machine that
preallocates most of the GPU for JAX. A stand-in `jax` package records the JAX platforms in
force when bm25s makes that call."""

import os
import subprocess
import sys
import textwrap

import pytest

# The modules that need bm25s (each imports it through realm.model.networks.bm25s_on_cpu).
IMPORTERS = ["realm.model.networks.question_match", "realm.model.index.bm25"]


@pytest.fixture
def recording_jax(tmp_path):
    package = tmp_path / "jax"
    package.mkdir()
    (package / "__init__.py").write_text("from . import lax\n")
    (package / "lax.py").write_text(textwrap.dedent(f"""
        import os
        import numpy as np

        def top_k(scores, k):
            with open({str(tmp_path / "platforms.txt")!r}, "a") as f:
                f.write(os.environ.get("JAX_PLATFORMS", "<unset>") + "\\n")
            order = np.argsort(-np.asarray(scores))[:k]
            return np.asarray(scores)[order], order
    """))
    return tmp_path


def _import_with_jax(jax_dir, module: str, platforms: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([str(jax_dir), env.get("PYTHONPATH", "")])
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True)
    return (jax_dir / "platforms.txt").read_text().split()


@pytest.mark.parametrize("module", IMPORTERS)
def test_bm25s_meets_jax_pinned_to_the_cpu(recording_jax, module):
    assert _import_with_jax(recording_jax, module, None) == ["cpu"]


def test_a_platform_the_user_chose_is_kept(recording_jax):
    assert _import_with_jax(recording_jax, IMPORTERS[0], "cuda") == ["cuda"]
