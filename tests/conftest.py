"""Fixtures shared by the generator's tests."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import (
    EXAMPLE_DUMMY,
    Built,
    build,
    edit_ops_readme_and_options,
    have_ucx,
    listing,
    run_cli,
)
from new_backend import GenerationResult, generate_project
from new_backend.catalogue import Catalogue, load_catalogue
from new_backend.kits import base_kit
from new_backend.update import update_project
from new_backend.validate import Answers

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


# -- generated projects, each built once per session (test_build runs their suites,
# -- test_mutation mutates the same builds) ---------------------------------------


@pytest.fixture(scope="session")
def built_dummy(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """examples/dummy, built."""
    return build(EXAMPLE_DUMMY, tmp_path_factory.mktemp("build-dummy"))


#: The release whose projects move to the vendored runtime (csrc/runtime/, 0.3.0) in
#: built_all_ops: its version and template hash.
MOVED_FROM = ("0.2.7", "03419e3fba1df937")


@pytest.fixture(scope="session")
def built_all_ops(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A project with every op (a name with an underscore and a digit), made by 0.2.7,
    edited as its README invites (edit_ops_readme_and_options), updated to this release
    with ``new-backend update``, and built: test_vendored checks the update, test_build
    runs its suite."""
    answers = Answers.checked(backend_name="all_ops2", ops="all")
    with base_kit(*MOVED_FROM) as kit:
        project = kit.render(answers.cookiecutter_context(), tmp_path_factory.mktemp("render"))
    edit_ops_readme_and_options(project)
    result = update_project(project, allow_dirty=True)
    assert not result.conflicts, result.diff()
    return build(project, tmp_path_factory.mktemp("build-all-ops"))


@pytest.fixture(scope="session")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The reference implementation over the c10d Store, every op, built."""
    rendered = generate_project(
        "store_all", ops="all", impl="store", output_dir=tmp_path_factory.mktemp("render")
    )
    return build(rendered.target, tmp_path_factory.mktemp("build-store"))


@pytest.fixture(scope="session")
def built_mpi(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Every op over MPI (MPICH from the package index, the `test` extra), built."""
    rendered = generate_project(
        "mpi_all", ops="all", impl="mpi", output_dir=tmp_path_factory.mktemp("render")
    )
    return build(rendered.target, tmp_path_factory.mktemp("build-mpi"))


@pytest.fixture(scope="session")
def built_ucx(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Every op over UCX (Debian's libucx-dev, which .ci/run installs), built."""
    if not have_ucx():
        pytest.skip("no UCX: apt-get install libucx-dev (or set UCX_HOME) to build the ucx project")
    rendered = generate_project(
        "ucx_all", ops="all", impl="ucx", output_dir=tmp_path_factory.mktemp("render")
    )
    return build(rendered.target, tmp_path_factory.mktemp("build-ucx"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The mutation catalogue (about 20 minutes on two cores) runs only when asked for.

    ``-m mutation`` runs it alone; ``python -m pytest tests`` and CI skip it
    (tests/test_mutation.py's checks that build nothing still run).
    """
    if "mutation" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the mutation catalogue runs when asked for: -m mutation")
    for item in items:
        if item.get_closest_marker("mutation") is not None:
            item.add_marker(skip)
