"""The wheel is self-contained: installed into a plain venv, its new-backend renders the example."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import new_backend
import pytest
from helpers import EXAMPLE_DUMMY, REPO, listing, tree

pytestmark = pytest.mark.timeout(600)


def check(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command; fail the test with its output if it fails; its stdout."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=500
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    check(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, REPO)
    (built,) = dist.glob("new_backend-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain venv (no system site-packages) with the wheel and its dependencies; its bin/."""
    venv = tmp_path_factory.mktemp("venv")
    check(sys.executable, "-m", "venv", venv)
    check(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    return venv / "bin"


def test_wheel_carries_the_whole_template(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    template = REPO / "template"
    expected = {
        f"new_backend/template/{p.relative_to(template).as_posix()}"
        for p in template.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert expected <= names, sorted(expected - names)
    assert "new_backend/catalogue.toml" in names
    kits = {f"new_backend/kits/{p.name}" for p in (REPO / "generator/new_backend/kits").iterdir()}
    assert kits and kits <= names  # the released templates update rebuilds bases from
    assert any(n.endswith("/.gitignore") for n in expected)  # dotfiles are not dropped


def test_installed_wheel_renders_the_example_from_another_folder(
    installed: Path, tmp_path: Path
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    version = check(installed / "new-backend", "--version", cwd=work, env=env)
    assert new_backend.__version__ in version
    check(installed / "new-backend", cwd=work, env=env)
    project = work / "dummy"
    assert (project / ".gitignore").is_file() and (project / ".new-backend.json").is_file()
    assert tree(project) == tree(EXAMPLE_DUMMY)
    assert listing(home) == {}
    # The template came from the installed package, not from this checkout.
    where = check(
        installed / "python",
        "-c",
        "import new_backend.generate as g; print(g.template_dir())",
        cwd=work,
        env=env,
    )
    assert Path(where.strip()).is_relative_to(installed.parent)
