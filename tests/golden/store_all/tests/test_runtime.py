"""The runtime around the ops: rendezvous methods, launchers, fork, shutdown."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import cases
from cases import OPS
from harness import BACKEND, Cluster, free_port

import store_all_collectives  # noqa: F401  (imported before forking, on purpose)

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
    """No thread starts at import, so forking after `import store_all_collectives` is safe."""
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


def test_split_groups_reduce_over_their_own_ranks():
    """c10d's split (what dist.split_group calls) at world size 3: groups [0, 2] and [1]."""
    cluster = Cluster(3)
    try:
        cluster.run("split_groups")
    finally:
        cluster.close()


def test_future_callbacks_that_issue_and_wait_for_ops():
    """DDP's comm hooks: a callback waits for an op it issued, three deep; gloo does this at once."""
    cluster = Cluster(3, group_timeout=20)
    try:
        cluster.run("callbacks_that_wait_for_ops")
    finally:
        cluster.close()


def test_destroy_from_a_receive_callback_while_another_receive_is_in_flight(monkeypatch):
    monkeypatch.setenv("MALLOC_PERTURB_", "165")
    cluster = Cluster(3)
    try:
        cluster.run("destroy_from_a_receive_callback")
    finally:
        cluster.close()


def test_sends_from_threads_while_the_group_is_destroyed(monkeypatch):
    monkeypatch.setenv("MALLOC_PERTURB_", "165")
    cluster = Cluster(2)
    try:
        cluster.run("sends_while_the_group_is_destroyed")
    finally:
        cluster.kill()  # the last sends went to a destroyed group

#: A rank of a plain script: runs every op once (or, with "timeout", ranks other than 0
#: run PROBE alone, which times out), then rank 0, the store's host, exits at once and
#: the others a few seconds later, without destroying their groups.
QUIET_EXIT = """
import sys, time, warnings
from datetime import timedelta
import torch.distributed as dist
warnings.simplefilter("ignore", FutureWarning)  # torch's notices about APIs the op cases call
import store_all_collectives
sys.path.insert(0, sys.argv[3])
import cases
from harness import Skip
rank, mode = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("store_all", timeout=timedelta(seconds=3))
if mode == "normal":
    for op in sorted(cases.OPS):
        try:
            cases.run(op)
        except Skip:
            pass
elif rank == 0:
    time.sleep(10)  # the others' PROBE times out after 3 s, and they ask who is missing (4 s)
else:
    try:
        cases.run(cases.PROBE)
    except RuntimeError as e:
        print("error:", str(e).splitlines()[0][:60], flush=True)
if rank != 0:
    time.sleep(3)  # rank 0 exits meanwhile: a process that polled its store would say so
"""


# (The dummy's collectives exchange nothing: one that rank 0 skips completes.)
@pytest.mark.parametrize("mode", ["normal", "timeout"])
def test_ranks_exit_without_a_word_after_the_store_s_host(mode, tmp_path):
    """Rank 0, which hosts the TCPStore, exits first; the others print nothing but their errors.

    A healthy group sends nothing to its store between ops (gloo neither), so
    no rank's request finds the store's host gone (TCPStore would print its
    backtrace).
    """
    if mode == "timeout" and not cases.PROBE:
        pytest.skip("the backend has none of the ops the runtime cases use")
    world = 3
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               TORCH_FR_DUMP_TEMP_FILE=str(tmp_path / "trace_"))  # fmt: skip
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", QUIET_EXIT, str(rank), mode, str(HERE)],
            env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for rank in range(world)
    ]
    said = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0] * world, said
    # The store implementation's collectives wait on the TCPStore, and torch's
    # socket layer warns when such a wait reaches its timeout: torch's words, at
    # the timeout, not at exit.
    said = ["".join(line for line in output.splitlines(True) if "] waitForInput: " not in line) for output in said]
    expected = "" if mode == "normal" else f"error: Backend {BACKEND} (rank 1): {cases.PROBE} #0 "
    for rank, output in enumerate(said[1:], 1):
        if mode == "normal":
            assert output == "", f"rank {rank} said:\n{output}"
        else:
            assert output.startswith(expected.replace("rank 1", f"rank {rank}")), f"rank {rank} said:\n{output}"
            assert len(output.splitlines()) == 1, f"rank {rank} said:\n{output}"


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
    """torchrun sets RANK, WORLD_SIZE and MASTER_*; init_process_group("store_all") just works."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         str(HERE / "launched.py")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ops passed") == 3, result.stdout + result.stderr
