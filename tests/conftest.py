"""Fixtures shared by the generator's tests."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import listing, run_cli
from new_backend import GenerationResult, generate_project
from new_backend.catalogue import Catalogue, load_catalogue

# The golden trees are generated projects, with tests of their own that need a
# built extension: they are data here, never collected.
collect_ignore_glob = ["golden/*"]

Render = Callable[..., GenerationResult]
Cli = Callable[..., Result]


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An empty output folder."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def render(out: Path) -> Render:
    """``render(name, **options)``: :func:`generate_project` into the ``out`` folder."""

    def _render(name: str = "dummy", **options: object) -> GenerationResult:
        options.setdefault("output_dir", out)
        return generate_project(name, **options)

    return _render


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Fresh, empty HOME and temp folders, so a test can check what lands there."""
    places = {"home": tmp_path / "home", "tmp": tmp_path / "tmp"}
    for place in places.values():
        place.mkdir()
    monkeypatch.setenv("HOME", str(places["home"]))
    monkeypatch.setenv("TMPDIR", str(places["tmp"]))
    monkeypatch.setattr(tempfile, "tempdir", str(places["tmp"]))
    return places


@pytest.fixture
def run(out: Path, isolated: dict[str, Path]) -> Iterator[Cli]:
    """``run(*args)``: run ``new-backend ARGS`` in the ``out`` folder with an isolated HOME.

    After the test HOME must still be empty: no cookiecutter replay file, no
    cookiecutter cache, nothing.
    """

    def _cli(*args: str) -> Result:
        return run_cli(args, cwd=out)

    yield _cli
    assert listing(isolated["home"]) == {}, (
        f"new-backend wrote to HOME: {listing(isolated['home'])}"
    )
