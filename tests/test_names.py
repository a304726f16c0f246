"""Backend names whose package could shadow a module of the generated test suite.

The package of backend NAME is ``NAME_collectives``, and the generated tests
import it, and each other, by plain name from ``tests/`` (pytest puts that
folder first on ``sys.path``). A test module named ``test_collectives`` made
the backend ``test`` unusable: its test suite imported itself instead of the
package. Collection alone shows it, so these tests need no build: the
extension is replaced by a stub module, since only Python names are at stake.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TEMPLATE
from new_backend import generate_project

# What the package needs of its extension while the tests are only collected.
STUB_EXTENSION = '''"""Stands in for the C++ extension: collection only looks names up."""


def __getattr__(name):
    return False if name.isupper() else (lambda *args, **kwargs: None)
'''


def collect(project: Path) -> subprocess.CompletedProcess:
    """``pytest --collect-only`` in a rendered project, with a stub for its extension."""
    package = project / "src" / f"{project.name}_collectives"
    (package / "_C.py").write_text(STUB_EXTENSION)
    (package / "_build_info.py").write_text(f"TORCH_VERSION = {_torch_version()!r}\n")
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def test_no_generated_test_module_is_named_like_a_package() -> None:
    """Packages are ``NAME_collectives``: no module of the generated tests may end that way."""
    modules = [p.stem for p in (TEMPLATE / "{{cookiecutter.backend_name}}" / "tests").glob("*.py")]
    assert modules
    assert [m for m in modules if m.endswith("_collectives")] == []


@pytest.mark.parametrize("impl", ["dummy", "store", "mpi"])
def test_a_backend_named_test_collects_its_own_tests(impl: str, tmp_path: Path) -> None:
    project = generate_project("test", ops="all", impl=impl, output_dir=tmp_path).target
    done = collect(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tests/test_ops.py::test_op[world2-allreduce]" in done.stdout, done.stdout


def test_the_collection_check_catches_a_shadowing_test_module(tmp_path: Path) -> None:
    """The check above can fail: with the old module name, collection breaks."""
    project = generate_project("test", output_dir=tmp_path).target
    (project / "tests" / "test_ops.py").rename(project / "tests" / "test_collectives.py")
    done = collect(project)
    assert done.returncode != 0, done.stdout
    assert "partially initialized module 'test_collectives'" in done.stderr, done.stderr


def test_the_generated_suite_says_why_it_skips(tmp_path: Path) -> None:
    """``pytest -q`` in a project lists each skip's reason (``-rs`` in its pytest config):
    without a GPU the CUDA tests skip, and the user is told why (the fake device's tests are
    not selected: they build it)."""
    project = generate_project("mine", output_dir=tmp_path).target
    collect(project)  # puts the stub extension in place
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*pytest, "tests/test_devices.py", "-k", "cuda"],
        cwd=project,
        env={
            **os.environ,
            "PYTHONPATH": str(project / "src"),
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIPPED [" in done.stdout, done.stdout
    assert "needs a GPU" in done.stdout or "built without CUDA" in done.stdout, done.stdout
