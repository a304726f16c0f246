"""Generated projects build against the installed torch and pass their own test suites.

Each project is built once per session (about a minute each on two cores) and
its generated tests run in real processes. Skip these with ``-m "not build"``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from helpers import Built, build
from new_backend.catalogue import load_catalogue, release
from new_backend.generate import generate_project

pytestmark = [pytest.mark.build, pytest.mark.timeout(1800)]

TORCH = release(torch.__version__)


def summary_counts(output: str) -> dict[str, int]:
    """``{"passed": 15, "failed": 1, ...}`` from pytest's closing line."""
    closing = [line for line in output.splitlines() if re.search(r"\d+ \w+.* in [\d.]+s", line)]
    assert closing, f"no pytest summary in:\n{output}"
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", closing[-1])
    return {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in counts}


#: What each project's own suite runs here. Every project runs what checks its ops; the store,
#: mpi and ucx projects add their transport's failures and their device path, mpi and ucx their
#: launchers (test_runtime). The runtime, its flight recorder, the benchmark module and the
#: packaging are the same in every project: the store project runs them (RUNTIME), in CI on the
#: newest torch only (.ci/run).
OPS = ("test_ops.py", "test_matrix.py")
TRANSPORT = (*OPS, "test_failures.py", "test_runtime.py", "test_devices.py")
STORE = (*OPS, "test_failures.py", "test_devices.py")
RUNTIME = ("test_runtime.py", "test_hang.py", "test_bench.py", "test_install.py")


def run_own_tests(built: Built, files: tuple[str, ...]) -> None:
    """Run the project's generated tests (``files`` of its tests/) against the built copy; all
    of them must pass."""
    report = built.project / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(built.site)}
    if sizes := os.environ.get("NEW_BACKEND_TEST_WORLD_SIZES"):  # e.g. "3", for a quicker run
        env[f"{built.answers['backend_name'].upper()}_TEST_WORLD_SIZES"] = sizes
    # (The dummy implementation's projects have no test_matrix.py: their ops zero.)
    paths = [str(path) for file in files if (path := built.project / "tests" / file).exists()]
    pytest_args = [*paths, "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args, f"--junitxml={report}"],
        cwd=built.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    cases = list(ET.parse(report).getroot().iter("testcase"))
    ids = [case.get("name", "") for case in cases]
    skips = {
        case.get("name", ""): skip.get("message", "")
        for case in cases
        if (skip := case.find("skipped")) is not None
    }
    counts = summary_counts(output)
    expected = {"passed": len(ids) - len(skips)} | ({"skipped": len(skips)} if skips else {})
    assert counts == expected, output
    assert len(ids) > len(skips), output
    # Only what this machine cannot run may skip: subgroups on two ranks, GPU
    # tests without a GPU, ops a newer torch added. No op test may skip here.
    newer = [op.name for op in load_catalogue().ops if op.since and release(op.since) > TORCH]
    for name, reason in skips.items():
        expected_reason = (
            "needs 3 ranks" in reason
            or "needs a GPU" in reason
            or (any(name.endswith(f"-{op}]") for op in newer) and "a newer torch" in reason)
        )
        assert expected_reason, f"{name} skipped: {reason}"
    # The parametrised op tests covered exactly the ops the project was generated with.
    tested = {m.group(1) for i in ids if (m := re.fullmatch(r"test_op\[world\d+-(\w+)\]", i))}
    assert tested == (set(built.answers["ops"]) if "test_ops.py" in files else set()), ids
    # The extension really came from the build, not from some other installation.
    package = f"{built.answers['backend_name']}_collectives"
    assert list((built.site / package).glob("_C*.so")), sorted(built.site.iterdir())


def test_example_dummy_builds_and_passes_its_own_tests(built_dummy: Built) -> None:
    """The project a user gets first: its ops, and its install (entry points, the wheel)."""
    run_own_tests(built_dummy, (*OPS, "test_install.py"))


def test_all_ops_project_builds_and_passes_its_own_tests(built_all_ops: Built) -> None:
    """Every op of the catalogue through the tutorial's dummy implementation, in a project
    made by 0.2.7, edited by its user and updated to this release (see built_all_ops)."""
    run_own_tests(built_all_ops, OPS)


def test_store_project_builds_and_passes_its_own_tests(built_store: Built) -> None:
    """Every op, dtype and reduce op against gloo, subgroups, failures, the device path."""
    run_own_tests(built_store, STORE)


def test_the_runtime_passes_its_tests_in_the_store_project(built_store: Built) -> None:
    """The runtime's own: launchers, teardown, options, the flight recorder, the benchmark
    module, the installed package."""
    suite = {path.name for path in (built_store.project / "tests").glob("test_*.py")}
    assert suite == {*STORE, *RUNTIME}, "a generated test file the two store runs leave out"
    run_own_tests(built_store, RUNTIME)


def test_mpi_project_builds_and_passes_its_own_tests(built_mpi: Built) -> None:
    """Every op, dtype and reduce op against gloo, subgroups, failures, launches: under mpirun."""
    run_own_tests(built_mpi, TRANSPORT)


def test_ucx_project_builds_and_passes_its_own_tests(built_ucx: Built) -> None:
    """Every op, dtype and reduce op against gloo, subgroups, failures, over UCX."""
    run_own_tests(built_ucx, TRANSPORT)


def test_the_installed_metadata_carries_both_registration_entry_points(built_dummy: Built) -> None:
    """torch 2.14+ finds the backend by name in ``torch.distributed.backends``; 2.13 autoloads
    ``torch.backends``. Both must survive the build into the installed metadata."""
    (dist_info,) = built_dummy.site.glob("*.dist-info")
    text = (dist_info / "entry_points.txt").read_text()
    name = built_dummy.answers["backend_name"]
    target = f"{name} = _{name}_collectives_autoload:register"
    for group in ("torch.distributed.backends", "torch.backends"):
        section = re.search(rf"^\[{re.escape(group)}\]\n((?:[^\[\n][^\n]*\n?)*)", text, re.M)
        assert section and target in section.group(1), f"[{group}] lacks {target!r}:\n{text}"


def runpath(shared: Path) -> tuple[list[str], list[str]]:
    """The RUNPATH entries and NEEDED libraries of a shared object, from readelf -d."""
    dynamic = subprocess.run(
        ["readelf", "-d", str(shared)], capture_output=True, text=True, check=True
    ).stdout
    paths = re.findall(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", dynamic)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dynamic)
    return (paths[0].split(":") if paths else []), needed


def loaded_from(site: Path, package: str, library: str) -> str:
    """Import ``package`` from ``site`` in a fresh process without LD_LIBRARY_PATH: the file of
    ``library`` it mapped."""
    script = (
        f"import {package}\n"
        "for line in open('/proc/self/maps'):\n"
        f"    if '/{library}' in line:\n"
        "        print(line.split()[-1]); break\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stdout + done.stderr
    return done.stdout.strip()


def test_mpi_extension_finds_pip_mpich_relative_to_itself(built_mpi: Built, tmp_path: Path) -> None:
    """pip's mpich lives in this environment (PREFIX/lib): the extension names it by $ORIGIN, so
    a copy of the environment elsewhere loads its own libmpi, with no LD_LIBRARY_PATH."""
    package = f"{built_mpi.answers['backend_name']}_collectives"
    (shared,) = (built_mpi.site / package).glob("_C*.so")
    paths, needed = runpath(shared)
    (soname,) = [n for n in needed if n.startswith("libmpi.")]
    prefix_lib = Path(sys.prefix, "lib").resolve()
    if not (prefix_lib / soname).is_file():
        pytest.skip(f"built against an MPI outside this environment (no {prefix_lib / soname})")
    # Relative to where pip installs the extension (PLATLIB/package), then absolute.
    installed = Path(sysconfig.get_path("platlib"), package).resolve()
    relative = "$ORIGIN/" + os.path.relpath(prefix_lib, installed)
    assert paths[:2] == [relative, str(prefix_lib)], paths
    # As built (pip --target, outside the environment): the absolute entry finds it.
    assert loaded_from(built_mpi.site, package, soname) == str(prefix_lib / soname)
    # The environment's layout somewhere else: PREFIX/lib/libmpi and PLATLIB/package, copied.
    moved = tmp_path / "moved-env"
    platlib = Path(sysconfig.get_path("platlib")).resolve()
    site = moved / platlib.relative_to(Path(sys.prefix).resolve())
    shutil.copytree(built_mpi.site / package, site / package)
    (moved / "lib").mkdir(exist_ok=True)
    shutil.copy2(prefix_lib / soname, moved / "lib" / soname)
    for extra in prefix_lib.iterdir():  # what libmpi needs itself (mpich's lib/mpich/)
        if extra.is_dir() and not (moved / "lib" / extra.name).exists():
            (moved / "lib" / extra.name).symlink_to(extra)
    assert loaded_from(site, package, soname) == str(moved / "lib" / soname)


TWO_BACKENDS = """
import sys
import torch
import torch.distributed as dist
import dummy_collectives, store_all_collectives  # both register, in one process

rank = int(sys.argv[1])
url = "tcp://127.0.0.1:" + sys.argv[2]
dist.init_process_group("store_all", init_method=url, rank=rank, world_size=2)
dummies = dist.new_group(backend="dummy")
summed, zeroed = torch.full((4,), rank + 1.0), torch.full((4,), rank + 1.0)
dist.all_reduce(summed)
dist.all_reduce(zeroed, group=dummies)
assert summed.tolist() == [3.0] * 4, summed  # store_all sums
assert zeroed.tolist() == [0.0] * 4, zeroed  # the dummy zeroes
assert dist.get_backend() == "store_all" and dist.get_backend(dummies) == "dummy"
dist.destroy_process_group()
print("ok", rank)
"""


def test_two_generated_backends_each_with_a_working_group_in_one_process(
    built_dummy: Built, built_store: Built
) -> None:
    """Two projects' extensions load side by side, and each backend serves its own group."""
    from new_backend.validate import DEFAULT_NAME

    assert built_dummy.answers["backend_name"] == DEFAULT_NAME == "dummy"
    env = {**os.environ, "PYTHONPATH": f"{built_dummy.site}:{built_store.site}"}
    port = subprocess.run(
        [sys.executable, "-c", "import dummy_collectives; print(dummy_collectives.free_port())"],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    ).stdout.strip()  # fmt: skip
    command = [sys.executable, "-c", TWO_BACKENDS]
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    ranks = [subprocess.Popen([*command, str(rank), port], env=env, **output) for rank in range(2)]
    said = [rank.communicate(timeout=300)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], said
    assert [s.strip().splitlines()[-1] for s in said] == ["ok 0", "ok 1"], said


RENAMED = """
import torch
import torch.distributed as dist
import renamed_collectives  # registers "renamed"

dist.init_process_group("renamed", store=dist.HashStore(), rank=0, world_size=1)
tensor = torch.ones(4)
dist.all_reduce(tensor)
assert tensor.tolist() == [0.0] * 4, tensor  # the dummy zeroes
dist.destroy_process_group()
print("ok")
"""


def test_a_project_published_under_another_name_builds_into_its_package(tmp_path: Path) -> None:
    """The distribution's name in pyproject.toml is the user's to change (to publish it as
    acme-renamed): the extension still goes into the package, and the backend works. (setup.py
    once derived the package from that name, and built acme_renamed._C.)"""
    (tmp_path / "render").mkdir()
    project = generate_project("renamed", ops="allreduce", output_dir=tmp_path / "render").target
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert 'name = "renamed-collectives"' in text
    pyproject.write_text(text.replace('name = "renamed-collectives"', 'name = "acme-renamed"'))
    built = build(project, tmp_path / "build")
    assert list((built.site / "renamed_collectives").glob("_C*.so")), sorted(built.site.iterdir())
    assert not (built.site / "acme_renamed").exists()
    env = {**os.environ, "PYTHONPATH": str(built.site)}
    done = subprocess.run(
        [sys.executable, "-c", RENAMED], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
