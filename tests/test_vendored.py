"""The runtime every project carries unchanged (csrc/runtime/), and moving old projects to it.

A project's C++ runtime is the template's ``csrc/runtime/`` copied byte for byte:
no backend name, op list or device list inside. What makes a project its own is
rendered into a few small files (``csrc/config.hpp``, ``csrc/collectives.cpp``, the
package's ``__init__.py``, ``tests/names.py``...), and its user's code is ``ops.*``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TEMPLATE, build
from new_backend import generate_project
from new_backend.kits import base_kit
from new_backend.update import update_project
from new_backend.validate import Answers

RUNTIME = TEMPLATE / "{{cookiecutter.backend_name}}" / "csrc" / "runtime"
#: The transports, each kept only in the projects of its implementation.
TRANSPORTS = {"store": "store_exchange", "mpi": "mpi_comm", "ucx": "ucx_comm"}
#: What the user owns: their bodies, their options and communicator, their README.
USER_FILES = ("csrc/ops.cpp", "csrc/ops.hpp", "README.md")
#: Issue 31's budget: two projects that differ only in their names differ in at most
#: this many lines of files other than the user's.
NAME_ONLY_BUDGET = 800


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def expected_runtime(impl: str) -> dict[str, bytes]:
    """The template's runtime folder, less the transports of other implementations."""
    others = {stem for i, stem in TRANSPORTS.items() if i != impl}
    return {path: data for path, data in files(RUNTIME).items() if path.split(".")[0] not in others}


@pytest.mark.parametrize("impl", ["dummy", "store", "mpi", "ucx"])
def test_the_runtime_is_the_templates_byte_for_byte_whatever_the_name_ops_and_devices(
    impl: str, tmp_path: Path
) -> None:
    projects = [
        generate_project("alpha", ops="all", impl=impl, output_dir=tmp_path).target,
        generate_project(
            "beta_2", ops="allreduce,send,recv", devices="cpu,npu", impl=impl, output_dir=tmp_path
        ).target,
    ]
    for project in projects:
        runtime = files(project / "csrc" / "runtime")
        assert runtime == expected_runtime(impl), sorted(runtime)
    assert not any(b"alpha" in data for data in files(projects[0] / "csrc" / "runtime").values())


def test_the_runtime_folder_says_it_is_vendored() -> None:
    readme = (RUNTIME / "README.md").read_text()
    assert readme.startswith("# Vendored")
    assert "new-backend update" in readme and "new-backend check" in readme


def differing_lines(a: Path, b: Path, a_name: str, b_name: str) -> dict[str, int]:
    """The files of ``a`` and ``b`` (paths compared with the names swapped) that differ, but the
    user's, each with its length in lines."""
    theirs = files(b)
    differ = {}
    for path, data in files(a).items():
        if path in USER_FILES:
            continue
        other = theirs[path.replace(a_name, b_name)]
        if data != other:
            differ[path] = len(data.decode().splitlines())
    return differ


@pytest.mark.parametrize("impl", ["store", "mpi", "ucx"])
def test_projects_that_differ_only_in_name_differ_in_a_few_rendered_files(
    impl: str, tmp_path: Path
) -> None:
    a = generate_project("alpha", ops="all", impl=impl, output_dir=tmp_path).target
    b = generate_project("beta_2", ops="all", impl=impl, output_dir=tmp_path).target
    differ = differing_lines(a, b, "alpha", "beta_2")
    assert not [path for path in differ if path.startswith("csrc/runtime/")], differ
    assert "csrc/config.hpp" in differ and "csrc/collectives.cpp" not in differ, differ
    assert sum(differ.values()) <= NAME_ONLY_BUDGET, differ


# -- a project of 0.2.7 moves to the vendored layout -------------------------------

USER_CPP = "\n// mine: a helper of my library, kept across updates\nint myHelper() { return 7; }\n"
USER_README = "Notes of mine, kept across updates.\n"


def edit_ops_readme_and_options(project: Path) -> None:
    """What the 0.2.7 README invites: code in ops.cpp, an option in ops.hpp, notes in README."""
    ops = project / "csrc" / "ops.cpp"
    end = "} // namespace ops\n"
    ops.write_text(ops.read_text().replace(end, end + USER_CPP))
    hpp = project / "csrc" / "ops.hpp"
    field = "  bool verbose = false;\n"
    described = '  field("verbose", &Options::verbose, "report each group created on stderr");\n'
    text = hpp.read_text()
    assert field in text and described in text
    hpp.write_text(
        text.replace(field, field + "  int64_t rails = 1;\n").replace(
            described, described + '  field("rails", &Options::rails, "network rails to use");\n'
        )
    )
    readme = project / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    readme.write_text("".join([lines[0], "\n", USER_README, *lines[1:]]))


RAILS = """
import torch, torch.distributed as dist, moved_collectives
options = moved_collectives.Options(rails=3)
dist.init_process_group("moved", store=dist.HashStore(), rank=0, world_size=1, pg_options=options)
t = torch.ones(4)
dist.all_reduce(t)
assert t.tolist() == [1.0] * 4, t
assert moved_collectives.group_options().rails == 3
dist.destroy_process_group()
print("ok")
"""


@pytest.mark.build
@pytest.mark.timeout(1800)
def test_a_0_2_7_project_with_edits_updates_to_the_vendored_runtime_builds_and_passes(
    tmp_path: Path,
) -> None:
    answers = Answers.checked(backend_name="moved", ops="allreduce,allgather", impl="store")
    with base_kit("0.2.7", "03419e3fba1df937") as kit:
        project = kit.render(answers.cookiecutter_context(), tmp_path / "old")
    assert (project / "csrc" / "backend.cpp").is_file()
    assert not (project / "csrc" / "runtime").exists()
    edit_ops_readme_and_options(project)

    result = update_project(project, allow_dirty=True)
    assert not result.conflicts, result.diff()
    assert not (project / "csrc" / "backend.cpp").exists()  # the old plumbing goes whole
    assert files(project / "csrc" / "runtime") == expected_runtime("store")
    assert USER_CPP in (project / "csrc" / "ops.cpp").read_text()
    hpp = (project / "csrc" / "ops.hpp").read_text()
    assert "int64_t rails = 1;" in hpp and '#include "runtime/context.hpp"' in hpp
    assert USER_README in (project / "README.md").read_text()
    assert "csrc/runtime/" in (project / "README.md").read_text()  # the template's news arrive
    assert json.loads((project / ".new-backend.json").read_text())["ops"] == [
        "allreduce", "allgather",
    ]  # fmt: skip

    built = build(project, tmp_path / "build")
    env = {**os.environ, "PYTHONPATH": str(built.site)}
    done = subprocess.run(
        [sys.executable, "-c", RAILS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_ops.py", "-q", "-x", "-p", "no:cacheprovider"],
        cwd=built.project, env={**env, "MOVED_TEST_WORLD_SIZES": "3"},
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and " failed" not in tests.stdout, tests.stdout[-2000:]
