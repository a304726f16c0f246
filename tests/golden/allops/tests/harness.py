"""Runs test cases on a group of real processes, one per rank.

A Cluster spawns ``world_size`` processes. Each initialises torch.distributed
with the "allops" backend, then runs the cases (functions in cases.py)
the test asks for and reports back. Starting processes costs seconds, so the
tests keep one Cluster per world size and run many cases on it. A case that
fails or hangs on any rank fails the test with every rank's traceback; a hung
cluster is killed and the next test starts a new one.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import socket
import traceback
from datetime import timedelta

BACKEND = "allops"

#: How long one case may take on the slowest rank before the cluster is killed.
CASE_TIMEOUT = float(os.environ.get("ALLOPS_TEST_CASE_TIMEOUT", "120"))
#: The process group timeout the ranks use.
GROUP_TIMEOUT = float(os.environ.get("ALLOPS_TEST_GROUP_TIMEOUT", "60"))


class Skip(Exception):
    """Raised by a case that cannot run in this configuration."""


class ClusterError(AssertionError):
    """A case failed, or the cluster stopped answering."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """``world_size`` ranks, spawned and joined into one process group."""

    def __init__(self, world_size: int, group_timeout: float = GROUP_TIMEOUT, env=None):
        self.world_size = world_size
        self.broken = False
        context = multiprocessing.get_context("spawn")
        port = free_port()
        self.conns = []
        self.procs = []
        for rank in range(world_size):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_serve,
                args=(rank, world_size, port, group_timeout, env or {}, child),
                daemon=True,
            )
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self._collect("init_process_group")

    def run(self, case: str, **params) -> list:
        """Runs ``cases.<case>(Ctx(**params))`` on every rank; returns each rank's result."""
        if self.broken:
            raise ClusterError("the cluster was killed by an earlier failure")
        for conn in self.conns:
            conn.send((case, params))
        return self._collect(f"{case}({params})")

    def close(self) -> None:
        if not self.broken:
            for conn in self.conns:
                try:
                    conn.send(None)
                except OSError:
                    pass
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()

    def kill(self) -> None:
        self.broken = True
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.join()

    def _collect(self, what: str) -> list:
        replies: list = [None] * self.world_size
        pending = set(range(self.world_size))
        deadline = CASE_TIMEOUT
        while pending:
            ready = multiprocessing.connection.wait([self.conns[r] for r in pending], deadline)
            if not ready:
                self.kill()
                raise ClusterError(
                    f"{what}: ranks {sorted(pending)} did not answer within {CASE_TIMEOUT:.0f} s "
                    "(hung); the cluster was killed"
                )
            for conn in ready:
                rank = self.conns.index(conn)
                try:
                    replies[rank] = conn.recv()
                except EOFError:
                    replies[rank] = ("error", f"rank {rank} exited (code {self.procs[rank].exitcode})")
                pending.discard(rank)
        errors = [(r, reply[1]) for r, reply in enumerate(replies) if reply[0] == "error"]
        if errors:
            if any("exited" in message for _, message in errors):
                self.kill()
            raise ClusterError(
                f"{what} failed on rank(s) {[r for r, _ in errors]}:\n"
                + "\n".join(f"--- rank {r} ---\n{message}" for r, message in errors)
            )
        skips = [reply[1] for reply in replies if reply[0] == "skip"]
        if skips:
            import pytest

            pytest.skip(skips[0])
        return [reply[1] for reply in replies]


def _serve(rank, world_size, port, group_timeout, env, conn):
    """The main loop of one rank."""
    os.environ.update(env)
    try:
        import torch.distributed as dist

        import allops_collectives  # noqa: F401  (registers the backend)

        dist.init_process_group(
            BACKEND,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=group_timeout),
        )
        import cases
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message is None:
            break
        name, params = message
        try:
            conn.send(("ok", cases.run(name, **params)))
        except Skip as e:
            conn.send(("skip", str(e)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
    dist.destroy_process_group()
