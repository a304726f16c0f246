"""PyTorch's own collective tests pass against generated all-ops backends.

Runs conformance/pytorch_suite.py in its CI subset on the all-ops store
project that test_build builds (conftest.py, once a session):
DistributedTest._DistTestBase from torch's test suite, at world size 3 on CPU,
one test or more per collective family, point-to-point and groups. The same
subset runs on the all-ops mpi project under ``--launcher mpirun``, and on the
ucx one where UCX is installed.
Skip with ``-m "not pytorch_suite"`` (or ``-m "not build"``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Built

pytestmark = [pytest.mark.build, pytest.mark.pytorch_suite, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "conformance" / "pytorch_suite.py"
# The all-ops projects of conftest.py, built once a session for test_build too.
NAME = "store_all"
MPI_NAME = "mpi_all"
UCX_NAME = "ucx_all"

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


@pytest.fixture(scope="session")
def store_site(built_store: Built) -> Path:
    """Where pip installed the all-ops store backend test_build tests (conftest.py)."""
    return built_store.site


@pytest.fixture(scope="session")
def mpi_site(built_mpi: Built) -> Path:
    """Where pip installed the all-ops MPI backend (MPICH from the package index)."""
    return built_mpi.site


@pytest.fixture(scope="session")
def ucx_site(built_ucx: Built) -> Path:
    """Where pip installed the all-ops UCX backend (Debian's libucx-dev)."""
    return built_ucx.site


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
