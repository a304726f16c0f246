"""PyTorch's own collective tests pass against generated all-ops backends.

Builds one ``--impl store --ops all`` project per session (about two minutes
on two cores) and runs conformance/pytorch_suite.py on it in its CI subset:
DistributedTest._DistTestBase from torch's test suite, at world size 3 on CPU,
one test or more per collective family, point-to-point and groups. Builds one
``--impl mpi --ops all`` project too (about three minutes) and runs the same
subset on it under ``--launcher mpirun``, and an ``--impl ucx --ops all`` one
(about a minute, where UCX is installed) for the same subset as the store's.
Skip with ``-m "not pytorch_suite"`` (or ``-m "not build"``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import have_ucx
from new_backend import generate_project

pytestmark = [pytest.mark.build, pytest.mark.pytorch_suite, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "conformance" / "pytorch_suite.py"
NAME = "suite3"  # a name with a digit, like users' names
MPI_NAME = "mpi_suite3"
UCX_NAME = "ucx_suite3"

#: The families the CI subset covers; each must have a test that passed.
FAMILIES = {
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_coalesced",
    "gather",
    "scatter",
    "all_to_all",
    "object",
    "send_recv",
    "batch_isend_irecv",
    "barrier",
    "work",
    "groups",
}


def build_site(name: str, impl: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where pip installed a freshly generated all-ops backend `name`."""
    pytest.importorskip("torch")
    rendered = generate_project(
        name, ops="all", impl=impl, output_dir=tmp_path_factory.mktemp("render")
    )
    site = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps"]
    done = subprocess.run(
        [*pip, "--target", str(site), str(rendered.target)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, f"building {name} failed:\n{done.stdout}\n{done.stderr}"
    return site


@pytest.fixture(scope="session")
def store_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where pip installed a freshly generated all-ops store backend."""
    return build_site(NAME, "store", tmp_path_factory)


@pytest.fixture(scope="session")
def mpi_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where pip installed a freshly generated all-ops MPI backend (MPICH from
    the package index, the `test` extra)."""
    return build_site(MPI_NAME, "mpi", tmp_path_factory)


@pytest.fixture(scope="session")
def ucx_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where pip installed a freshly generated all-ops UCX backend (Debian's libucx-dev)."""
    if not have_ucx():
        pytest.skip("no UCX: apt-get install libucx-dev (or set UCX_HOME)")
    return build_site(UCX_NAME, "ucx", tmp_path_factory)


def run_harness(
    site: Path, work: Path, *args: str, name: str = NAME
) -> tuple[subprocess.CompletedProcess, dict]:
    report = work / "report.json"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "--backend",
            name,
            "--package",
            f"{name}_collectives",
            "--report",
            str(report),
            "--logs",
            str(work / "logs"),
            *args,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=2000,
    )
    return done, (json.loads(report.read_text()) if report.exists() else {})


def test_store_backend_passes_the_ci_subset(store_site: Path, tmp_path: Path) -> None:
    done, report = run_harness(store_site, tmp_path, "--subset", "ci")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    results = report["results"]
    failed = [r["test"] for r in results if r["outcome"] == "failed"]
    assert not failed, output
    passed = {r["category"] for r in results if r["outcome"] == "passed"}
    # Every collective family, point-to-point and groups actually ran.
    assert passed >= FAMILIES, output
    assert report["plugin"] and report["backend"] == NAME


def test_ucx_backend_passes_the_ci_subset(ucx_site: Path, tmp_path: Path) -> None:
    """The worked example of a third-party library: every test of the subset passes, none skips."""
    done, report = run_harness(ucx_site, tmp_path, "--subset", "ci", name=UCX_NAME)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    results = report["results"]
    assert len(results) >= 30, output
    not_passed = [(r["test"], r["outcome"]) for r in results if r["outcome"] != "passed"]
    assert not not_passed, output
    assert {r["category"] for r in results} >= FAMILIES, output
    assert report["plugin"] and report["backend"] == UCX_NAME


def test_mpi_backend_passes_the_ci_subset_under_mpirun(mpi_site: Path, tmp_path: Path) -> None:
    """One MPI job of three ranks runs the whole subset, every test on one process group."""
    done, report = run_harness(
        mpi_site,
        tmp_path,
        *("--subset", "ci", "--launcher", "mpirun", "--run-timeout", "900"),
        name=MPI_NAME,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    results = report["results"]
    assert len(results) >= 30, output
    not_passed = [(r["test"], r["outcome"]) for r in results if r["outcome"] != "passed"]
    assert not not_passed, output  # none failed, and none was skipped either
    assert {r["category"] for r in results} >= FAMILIES, output
    assert report["launcher"] == "mpirun" and report["backend"] == MPI_NAME


def test_harness_lists_the_suite_without_running_it(store_site: Path, tmp_path: Path) -> None:
    done, _ = run_harness(store_site, tmp_path, "--subset", "full", "--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("test_all_reduce_sum ") for line in lines)
    assert "exception: " in done.stdout  # the monitored_barrier tests, with reasons
    assert not any("ddp" in line.split()[0].lower() for line in lines[:-1])
