"""Runs test cases on a group of real processes, one per rank.

A Cluster starts ``world_size`` processes with mpirun. Each initialises
torch.distributed with the backend (names.py), then runs the cases
(functions in cases.py) the test asks for and reports back. Starting
processes costs seconds, so the tests keep one Cluster per world size and run
many cases on it. A case that fails or hangs on any rank fails the test with
every rank's traceback; a hung cluster is killed and the next test starts a
new one.

MPI processes must be started by an MPI launcher, so the ranks are
``mpirun -n N python -m harness``: each connects back to the test process
(multiprocessing.connection, with a random key) and then serves cases exactly
like a spawned rank. <NAME>_MPIRUN overrides the launcher command
(default: the mpirun beside this Python, as `pip install mpich` installs it,
else the first on the PATH); mpirun_command() adds the options the tests need
for MPICH's, Intel MPI's and Open MPI's.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta

from names import ENV, NAME, PACKAGE

BACKEND = NAME
#: The environment variable that hands a rank started by mpirun its configuration.
CLUSTER_VARIABLE = ENV + "TEST_CLUSTER"

#: How long one case may take on the slowest rank before the cluster is killed.
CASE_TIMEOUT = float(os.environ.get(ENV + "TEST_CASE_TIMEOUT", "120"))
#: How long the other ranks get to answer once one failed (seconds).
AFTER_A_FAILURE = 10.0
#: The process group timeout the ranks use.
GROUP_TIMEOUT = float(os.environ.get(ENV + "TEST_GROUP_TIMEOUT", "60"))
#: In a rank: the timeout of its process group, in seconds.
RANK_GROUP_TIMEOUT = GROUP_TIMEOUT
#: The name the fake accelerator (tests/fake_accelerator) takes in the ranks of a
#: Cluster(fake=...): no device of this project's is out-of-tree.
FAKE_DEVICE = "fake"


class Skip(Exception):
    """Raised by a case that cannot run in this configuration."""


class ClusterError(AssertionError):
    """A case failed, or the cluster stopped answering."""


def free_port() -> int:
    """A port for rank 0's store: the package's free_port(), below the ephemeral range."""
    package = importlib.import_module(PACKAGE)

    return package.free_port()


class Cluster:
    """``world_size`` ranks, started and joined into one process group.

    ``init`` picks how they rendezvous: "tcp" (``tcp://`` URL), "env"
    (``env://``: MASTER_ADDR and friends), "file" (``file://``) or "store" (an
    explicit TCPStore passed as ``store=``). ``start`` is how the ranks start:
    "mpirun" (MPI's launcher), or the multiprocessing start methods "spawn"
    and "fork", which only make sense for one rank (each process they start is
    an MPI world of its own).
    """

    def __init__(
        self,
        world_size: int,
        group_timeout: float = GROUP_TIMEOUT,
        init: str = "tcp",
        start: str = "mpirun",
        env=None,
        scratch: str | None = None,
        fake: str | None = None,
    ):
        """``fake``: the fake accelerator's library (fake_accelerator.build()), loaded in every rank."""
        self.world_size = world_size
        self.broken = False
        # Where a rank whose collective timed out, and its peers, write their
        # flight recorder (TORCH_FR_DUMP_TEMP_FILE; gone with the cluster).
        self.dumps = tempfile.mkdtemp(prefix=f"{BACKEND}-flight-record-")
        env = {"TORCH_FR_DUMP_TEMP_FILE": os.path.join(self.dumps, "trace_rank_"), **(env or {})}
        rendezvous = {"init": init, "port": free_port(), "timeout": group_timeout, "fake": fake}
        if init == "file":
            rendezvous["file"] = os.path.join(scratch or tempfile.mkdtemp(), "rendezvous")
        self.conns = []
        self.procs = []
        self.mpirun = None
        if start == "mpirun":
            self._start_with_mpirun(rendezvous, env or {})
            self._collect("init_process_group")
            return
        context = multiprocessing.get_context(start)
        for rank in range(world_size):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_serve,
                args=(rank, world_size, rendezvous, env or {}, child),
                daemon=True,
            )
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self._collect("init_process_group")

    def run(self, case: str, exits: frozenset[int] = frozenset(), **params) -> list:
        """Runs ``cases.<case>(Ctx(**params))`` on every rank; returns each rank's result.

        Ranks in ``exits`` are expected to exit during the case (their result is None).
        """
        if self.broken:
            raise ClusterError("the cluster was killed by an earlier failure")
        for conn in self.conns:
            conn.send((case, params))
        return self._collect(f"{case}({params})", exits)

    def run_each(self, cases: list[str], **params) -> None:
        """Runs each case in turn; one for an op this torch lacks (a newer torch has it) is passed over."""
        import pytest

        for case in cases:
            try:
                self.run(case, **params)
            except pytest.skip.Exception as skip:
                if "a newer torch" not in str(skip):
                    raise

    def close(self) -> None:
        shutil.rmtree(self.dumps, ignore_errors=True)
        if self.broken:
            self.kill()
            return
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        if self.mpirun is not None:
            try:
                self.mpirun.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
            return
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()

    def kill(self) -> None:
        self.broken = True
        shutil.rmtree(self.dumps, ignore_errors=True)
        if self.mpirun is not None:
            for pid in self.pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (OSError, TypeError):
                    pass  # gone already, or never connected
            try:
                os.killpg(self.mpirun.pid, signal.SIGKILL)  # mpirun and its proxies
            except OSError:
                pass
            self.mpirun.wait()
            return
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.join()

    def _start_with_mpirun(self, rendezvous: dict, env: dict) -> None:
        """``mpirun -n N python -m harness``; each rank connects back and says who it is."""
        authkey = secrets.token_bytes(32)
        listener = multiprocessing.connection.Listener(("127.0.0.1", 0), authkey=authkey)
        config = {"address": listener.address, "authkey": authkey.hex(), "rendezvous": rendezvous, "env": env}
        here = os.path.dirname(os.path.abspath(__file__))
        child_env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        child_env[CLUSTER_VARIABLE] = json.dumps(config)
        self.output = tempfile.TemporaryFile("w+")
        self.pids = [None] * self.world_size
        self.conns = [None] * self.world_size
        self.mpirun = subprocess.Popen(
            [*mpirun_command(survive_exits=True), "-n", str(self.world_size)]
            + [sys.executable, "-m", "harness"],
            env=child_env, stdin=subprocess.DEVNULL, stdout=self.output, stderr=subprocess.STDOUT,
            start_new_session=True,  # kill() takes mpirun's helpers too
        )  # fmt: skip
        accepted: list = []
        stop = threading.Event()

        def accept() -> None:
            while len(accepted) < self.world_size and not stop.is_set():
                try:
                    accepted.append(listener.accept())
                except (OSError, EOFError, multiprocessing.AuthenticationError):
                    pass  # a stranger, or the poke below

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        deadline = time.monotonic() + CASE_TIMEOUT
        while acceptor.is_alive() and self.mpirun.poll() is None and time.monotonic() < deadline:
            acceptor.join(0.1)
        if acceptor.is_alive():
            stop.set()
            socket.create_connection(listener.address).close()  # wakes accept()
            acceptor.join()
        listener.close()
        for conn in accepted:
            rank, self.pids[rank] = conn.recv()
            self.conns[rank] = conn
        if len(accepted) < self.world_size:
            self.kill()
            raise ClusterError(
                f"mpirun started {len(accepted)} of {self.world_size} ranks within "
                f"{CASE_TIMEOUT:.0f} s:\n{self.mpirun_output()}"
            )

    def mpirun_output(self, lines: int = 40) -> str:
        """The last lines mpirun and the ranks printed."""
        self.output.seek(0)
        return "".join(self.output.readlines()[-lines:])

    def _exited(self, rank: int) -> str:
        """What to say about a rank that exited in the middle of a case."""
        if self.mpirun is not None:
            time.sleep(1)  # let it finish printing
            return f"rank {rank} exited; the last output of mpirun:\n{self.mpirun_output()}"
        self.procs[rank].join(timeout=10)
        return f"rank {rank} exited (code {self.procs[rank].exitcode})"

    def _collect(self, what: str, exits: frozenset[int] = frozenset()) -> list:
        replies: list = [None] * self.world_size
        pending = set(range(self.world_size))
        deadline = CASE_TIMEOUT
        while pending:
            ready = multiprocessing.connection.wait([self.conns[r] for r in pending], deadline)
            if not ready:
                self.kill()
                failed = [(r, reply[1]) for r, reply in enumerate(replies) if reply and reply[0] == "error"]
                raise ClusterError(
                    f"{what}: ranks {sorted(pending)} did not answer within {deadline:.0f} s "
                    "(hung); the cluster was killed"
                    + "".join(f"\n--- rank {r}, which failed before ---\n{message}" for r, message in failed)
                )
            for conn in ready:
                rank = self.conns.index(conn)
                try:
                    replies[rank] = conn.recv()
                except EOFError:
                    replies[rank] = ("ok", None) if rank in exits else ("error", self._exited(rank))
                    self.broken = self.broken or rank in exits
                pending.discard(rank)
                if replies[rank][0] == "error":
                    # A rank that failed leaves the others waiting for it in their
                    # next collective: its error, soon, rather than their timeout.
                    deadline = min(deadline, AFTER_A_FAILURE)
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


def mpirun_command(survive_exits: bool = False) -> list[str]:
    """The MPI launcher and its options, for test clusters and launcher tests.

    the package's mpirun_command() (<NAME>_MPIRUN if set; else the mpirun
    beside this Python, as `pip install mpich` puts it there, else the first
    mpirun on the PATH), plus what the failure tests need: a rank that dies
    must not take the others with it, since they check that the others notice.
    Open MPI's mpirun needs survive_exits for that, and then exits with 0
    whatever the ranks' statuses, so the tests that read its status leave it off.
    """
    package = importlib.import_module(PACKAGE)

    try:
        command = package.mpirun_command()
    except FileNotFoundError as e:
        raise ClusterError(str(e)) from None
    kind, major = package.mpi_launcher(command[0])
    if kind == "hydra" and "-disable-auto-cleanup" not in command:  # MPICH, Intel MPI
        command.append("-disable-auto-cleanup")
    keep_going = "orte_abort_on_non_zero_status"
    if survive_exits and kind == "openmpi" and 0 < major < 5 and keep_going not in command:
        # Open MPI 4 (ORTE) ends the job when a rank exits with a non-zero
        # status; a rank killed by a signal still does (faults.py).
        command += ["--mca", keep_going, "0"]
    return command


def _init(rank: int, world_size: int, rendezvous: dict) -> None:
    import torch
    import torch.distributed as dist

    package = importlib.import_module(PACKAGE)

    global RANK_GROUP_TIMEOUT
    RANK_GROUP_TIMEOUT = rendezvous["timeout"]

    if package.WITH_CUDA and torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    if rendezvous.get("fake"):
        import fake_accelerator

        fake_accelerator.load(rendezvous["fake"], FAKE_DEVICE)
        if FAKE_DEVICE not in package.DEVICES:
            package.register([*package.DEVICES, FAKE_DEVICE])

    timeout = timedelta(seconds=rendezvous["timeout"])
    how = rendezvous["init"]
    if how == "tcp":
        url = f"tcp://127.0.0.1:{rendezvous['port']}"
        dist.init_process_group(BACKEND, init_method=url, rank=rank, world_size=world_size, timeout=timeout)
    elif how == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rendezvous["port"]),
                          RANK=str(rank), WORLD_SIZE=str(world_size))
        dist.init_process_group(BACKEND, timeout=timeout)
    elif how == "file":
        url = f"file://{rendezvous['file']}"
        dist.init_process_group(BACKEND, init_method=url, rank=rank, world_size=world_size, timeout=timeout)
    elif how == "store":
        store = dist.TCPStore("127.0.0.1", rendezvous["port"], world_size, rank == 0, timeout=timeout)
        dist.init_process_group(BACKEND, store=store, rank=rank, world_size=world_size, timeout=timeout)
    else:
        raise ValueError(f"unknown init method {how!r}")


def _serve(rank, world_size, rendezvous, env, conn):
    """The main loop of one rank."""
    os.environ.update(env)
    try:
        import torch.distributed as dist

        _init(rank, world_size, rendezvous)
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
    if dist.is_initialized():
        dist.destroy_process_group()


def _main() -> None:
    """A rank started by mpirun (``python -m harness``): connect back, then serve."""
    config = json.loads(os.environ.pop(CLUSTER_VARIABLE))
    os.environ.update(config["env"])
    package = importlib.import_module(PACKAGE)

    found = package.launcher_rank_and_size()
    if found is None:
        sys.exit("harness: no rank in the environment; start this with mpirun")
    rank, world_size = found
    conn = multiprocessing.connection.Client(tuple(config["address"]), authkey=bytes.fromhex(config["authkey"]))
    conn.send((rank, os.getpid()))
    _serve(rank, world_size, config["rendezvous"], config["env"], conn)


if __name__ == "__main__":
    import harness  # cases.py imports this file as `harness`: serve with that module, not __main__

    harness._main()
