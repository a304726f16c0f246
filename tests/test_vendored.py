"""The runtime every project carries unchanged (csrc/runtime/), and moving old projects to it.

A project's C++ runtime is the template's ``csrc/runtime/`` copied byte for byte:
no backend name, op list or device list inside. What makes a project its own is
rendered into a few small files (``csrc/config.hpp``, ``csrc/collectives.hpp``, the
package's ``__init__.py``, ``tests/names.py``...), and its user's code is ``ops.*``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import TEMPLATE, USER_HELPER, USER_NOTES, Built, tree
from new_backend import generate_project
from new_backend.update import USER_FILES

RUNTIME = TEMPLATE / "{{cookiecutter.backend_name}}" / "csrc" / "runtime"
#: The transports, each kept only in the projects of its implementation.
TRANSPORTS = {"store": "store_exchange", "mpi": "mpi_comm", "ucx": "ucx_comm"}
#: Issue 31's budget: two projects that differ only in their names differ in at most
#: this many lines of files other than the user's.
NAME_ONLY_BUDGET = 800


def expected_runtime(impl: str) -> dict[str, bytes]:
    """The template's runtime folder, less the transports of other implementations."""
    others = {stem for i, stem in TRANSPORTS.items() if i != impl}
    return {path: data for path, data in tree(RUNTIME).items() if path.split(".")[0] not in others}


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
        runtime = tree(project / "csrc" / "runtime")
        assert runtime == expected_runtime(impl), sorted(runtime)
    assert not any(b"alpha" in data for data in tree(projects[0] / "csrc" / "runtime").values())


@pytest.mark.build
@pytest.mark.parametrize("devices", ["npu", "cpu,npu"])
def test_the_runtime_compiles_for_an_out_of_tree_device_alone_or_with_cpu(
    devices: str, tmp_path: Path
) -> None:
    """kDevices is never empty: a project for an out-of-tree device alone serves PrivateUse1."""
    from torch.utils import cpp_extension

    project = generate_project("npu_only", ops="all", devices=devices, output_dir=tmp_path).target
    includes = [project / "csrc", *cpp_extension.include_paths()]
    command = [
        os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", "-Wall", "-Werror",
        *(f"-I{path}" for path in includes), f"-I{sysconfig.get_paths()['include']}",
        str(project / "csrc" / "runtime" / "runtime.cpp"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_runtime_folder_says_it_is_vendored() -> None:
    readme = (RUNTIME / "README.md").read_text()
    assert readme.startswith("# Vendored")
    assert "new-backend update" in readme and "new-backend check" in readme


def differing_lines(a: Path, b: Path, a_name: str, b_name: str) -> dict[str, int]:
    """The files of ``a`` and ``b`` (paths compared with the names swapped) that differ, but the
    user's, each with its length in lines."""
    theirs = tree(b)
    differ = {}
    for path, data in tree(a).items():
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
    assert "csrc/config.hpp" in differ and "csrc/collectives.hpp" not in differ, differ
    assert sum(differ.values()) <= NAME_ONLY_BUDGET, differ


# -- a project of 0.2.7 moves to the vendored layout -------------------------------

RAILS = """
import torch, torch.distributed as dist, all_ops2_collectives as backend
options = backend.Options(rails=3)
store = dist.HashStore()
dist.init_process_group("all_ops2", store=store, rank=0, world_size=1, pg_options=options)
t = torch.ones(4)
dist.all_reduce(t)
assert t.tolist() == [0.0] * 4, t  # the dummy zeroes
assert backend.group_options().rails == 3
dist.destroy_process_group()
print("ok")
"""


@pytest.mark.build
@pytest.mark.timeout(1800)
def test_a_0_2_7_project_with_edits_updates_to_the_vendored_runtime_and_builds(
    built_all_ops: Built, tmp_path: Path
) -> None:
    """built_all_ops was made by 0.2.7 (csrc/backend.cpp...), edited as its README invites,
    then updated: it is now this release's render plus the user's edits, byte for byte, and
    the option the user added works (test_build runs its suite)."""
    project = built_all_ops.project
    fresh = generate_project("all_ops2", ops="all", output_dir=tmp_path).target
    mine, expected = tree(project), tree(fresh)
    built = ("build/", "junit.xml", "src/all_ops2_collectives/_build_info.py")
    left = [p for p in mine.keys() - expected.keys() if not p.startswith(built)]
    left = [p for p in left if "__pycache__" not in p and ".egg-info/" not in p]
    assert not left, left  # csrc/backend.cpp and the rest of 0.2.7's plumbing went
    differ = sorted(path for path in expected if mine.get(path) != expected[path])
    assert differ == sorted(USER_FILES), differ
    assert USER_HELPER in (project / "csrc" / "ops.cpp").read_text()
    hpp = (project / "csrc" / "ops.hpp").read_text()
    assert "int64_t rails = 1;" in hpp and '#include "runtime/context.hpp"' in hpp
    readme = (project / "README.md").read_text()
    assert USER_NOTES in readme and "csrc/runtime/" in readme  # theirs, and the news

    env = {**os.environ, "PYTHONPATH": str(built_all_ops.site)}
    done = subprocess.run(
        [sys.executable, "-c", RAILS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
