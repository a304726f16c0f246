"""The runtime around the ops: rendezvous methods, launchers, fork, shutdown."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cases import OPS
from harness import Cluster, free_port

import my_rdma2_collectives  # noqa: F401  (imported before forking, on purpose)

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("init", ["env", "file", "store"])
def test_rendezvous_methods(init, tmp_path):
    """env://, file:// and an explicit store= (tcp:// is what every other test uses)."""
    cluster = Cluster(2, init=init, scratch=str(tmp_path))
    try:
        cluster.run_each(sorted(OPS))
    finally:
        cluster.close()


def test_ranks_forked_from_a_parent_that_imported_the_package():
    """No thread starts at import, so forking after `import my_rdma2_collectives` is safe."""
    cluster = Cluster(3, start="fork")
    try:
        cluster.run_each(sorted(OPS))
    finally:
        cluster.close()


def test_destroy_from_a_future_callback(monkeypatch):
    """The last reference to a group dropped in its op's callback: nothing freed is touched.

    glibc fills freed memory with a pattern (MALLOC_PERTURB_), so a use after
    free shows as a wrong value or a crash instead of passing unnoticed.
    """
    monkeypatch.setenv("MALLOC_PERTURB_", "165")
    cluster = Cluster(2)
    try:
        cluster.run("destroy_from_a_callback")
    finally:
        cluster.close()


def test_options_reach_the_group_from_pg_options_and_the_environment():
    cluster = Cluster(3)
    try:
        cluster.run("group_options")
    finally:
        cluster.kill()  # the group whose creation failed is half made


def test_abort_and_shutdown_at_once_return_promptly():
    cluster = Cluster(2)
    try:
        cluster.run("shutdown_and_abort_at_once")
    finally:
        cluster.close()


def test_ops_show_in_the_profiler_and_set_timeout_applies():
    cluster = Cluster(2)
    try:
        cluster.run("profiled_and_timed")
    finally:
        cluster.kill()  # rank 0's timed-out op left the group unusable


def test_destroy_process_group_with_pending_work():
    cluster = Cluster(3)
    try:
        cluster.run("destroy_pending")
    finally:
        cluster.kill()  # the group is gone: this cluster is done


def test_under_torchrun():
    """torchrun sets RANK, WORLD_SIZE and MASTER_*; init_process_group("my_rdma2") just works."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         str(HERE / "launched.py")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ops passed") == 3, result.stdout + result.stderr
