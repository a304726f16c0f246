#!/usr/bin/env python3
"""Run PyTorch's own collective tests against a torch.distributed backend.

The tests are DistributedTest._DistTestBase from
torch.testing._internal.distributed.distributed_test, the suite PyTorch runs
against gloo, nccl and ucc, limited to collectives, point-to-point and groups
(no DDP, models, autograd, profiler, GPU or NCCL-only tests). Each test runs in
WORLD_SIZE new processes, as in PyTorch's test_distributed_spawn.py (forked
from a forkserver by default; --start-method spawn for fresh interpreters).

    # a project made by `new-backend NAME ...`, installed in this environment
    python conformance/pytorch_suite.py --backend NAME --package NAME_collectives
    # the same tests against gloo, for comparison
    python conformance/pytorch_suite.py --backend gloo --subset full

A backend whose ranks must be one MPI job (a generated ``--impl mpi`` one) runs
under --launcher mpirun instead, the way PyTorch ran this suite for MPI:
``mpirun -n WORLD_SIZE`` of this script, every rank joins one process group
once and runs all the tests in the same order; rank 0 reports.

    python conformance/pytorch_suite.py --backend NAME --package NAME_collectives \
        --launcher mpirun

Options: --subset ci (default, a quick subset covering every family) or full,
-k EXPR (substring or glob, repeatable), --list, --world-size N (default 3),
--report FILE.json, --no-group-tests; see conformance/README.md. Exit status 0
when no test failed (on any rank).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from collections import Counter
from datetime import timedelta
from typing import NoReturn, TextIO

HERE = os.path.dirname(os.path.abspath(__file__))

#: Where MPI launchers put each process's rank and the number of processes:
#: MPICH and Intel MPI (Hydra), Open MPI.
LAUNCHER_VARIABLES = [("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")]
#: Seconds mpirun may take to exit once rank 0 has reported.
EXIT_GRACE = 60


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="pytorch_suite.py",
        description="Run PyTorch's DistributedTest collective, point-to-point and "
        "group tests against a torch.distributed backend.",
    )
    p.add_argument(
        "--backend",
        required=True,
        help="backend name as passed to init_process_group (e.g. gloo, or NAME)",
    )
    p.add_argument(
        "--package",
        default="",
        help="package that registers the backend on import (NAME_collectives); "
        "not needed for backends built into torch",
    )
    p.add_argument("--world-size", type=int, default=3, help="ranks per test (default 3)")
    p.add_argument(
        "--subset",
        choices=["ci", "full"],
        default="ci",
        help="ci: a few tests per family (default); full: every test in scope",
    )
    p.add_argument(
        "-k",
        dest="exprs",
        action="append",
        default=[],
        metavar="EXPR",
        help="only tests whose name contains EXPR (or matches it as a glob); repeatable",
    )
    p.add_argument(
        "--list", action="store_true", help="list the selected tests with their family and exit"
    )
    p.add_argument(
        "--group-tests",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the subgroup tests (test_*_group: collectives in a group of "
        "ranks 1 and 2) that PyTorch skips below world size 8 for every "
        "backend but MPI (default: run them; --no-group-tests skips them "
        "as PyTorch does)",
    )
    p.add_argument(
        "--no-exceptions",
        action="store_true",
        help="also run the tests on the exception list (to see them fail)",
    )
    p.add_argument(
        "--start-method",
        choices=["forkserver", "spawn", "fork"],
        default="forkserver",
        help="how each test's ranks start: forkserver (default) forks them from "
        "a server that imported torch and the backend once; spawn starts "
        "fresh interpreters as PyTorch's CI does (about 10 s more per test "
        "on a small machine); fork forks the runner itself",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=180,
        help="seconds before a test's ranks are killed (default 180); under "
        "--launcher mpirun, how long the ranks wait for each other to finish a "
        "test before they give up the run",
    )
    p.add_argument(
        "--launcher",
        choices=["multiprocessing", "mpirun"],
        default="multiprocessing",
        help="multiprocessing (default): each test spawns its ranks; mpirun: "
        "mpirun starts WORLD_SIZE ranks once, which run every test in one "
        "process group (for backends whose ranks must be one MPI job)",
    )
    p.add_argument(
        "--mpirun",
        metavar="COMMAND",
        default="",
        help="the MPI launcher and its options (default: the mpirun beside this "
        "Python, as pip install mpich puts it, else the first on the PATH)",
    )
    p.add_argument(
        "--run-timeout",
        type=int,
        default=3600,
        help="under --launcher mpirun, seconds before the whole run is killed (default 3600)",
    )
    p.add_argument("--report", metavar="FILE", help="write per-test results as JSON")
    p.add_argument(
        "--logs",
        metavar="DIR",
        help="keep each rank's output in DIR/TEST.rankN.log (default: a new "
        "temporary folder, named at the end when a test failed)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print full tracebacks of failures")
    return p.parse_args(argv)


def configure_environment(args: argparse.Namespace) -> None:
    """What _suite_tests reads at import, in this process and in every rank."""
    os.environ["BACKEND"] = args.backend
    os.environ["WORLD_SIZE"] = str(args.world_size)
    os.environ["PYTORCH_SUITE_PACKAGE"] = args.package
    os.environ["PYTORCH_SUITE_START"] = "mpirun" if args.launcher == "mpirun" else args.start_method
    os.environ["PYTORCH_SUITE_GROUP_TESTS"] = "1" if args.group_tests else ""
    os.environ["PYTORCH_SUITE_NO_EXCEPTIONS"] = "1" if args.no_exceptions else ""
    # Read by common_distributed at import: how long the parent waits for a
    # test's ranks before killing them.
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.timeout)
    if not args.list:
        args.logs = os.path.abspath(args.logs or tempfile.mkdtemp(prefix="pytorch_suite_logs_"))
        os.makedirs(args.logs, exist_ok=True)
        os.environ["PYTORCH_SUITE_LOGS"] = args.logs
    # The ranks and the forkserver import the harness module by name: spawn
    # passes sys.path on, but the forkserver imports its preload modules before
    # it applies sys.path, so PYTHONPATH must name this folder.
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if HERE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([HERE, *paths])


def select(suite_mod, args: argparse.Namespace) -> list[str]:
    names = suite_mod.in_scope()
    if args.subset == "ci":
        available = set(names)
        missing = [n for n in suite_mod.CI_SUBSET if n not in available]
        if missing:
            print(f"note: CI subset tests not in this torch: {', '.join(missing)}", file=sys.stderr)
        names = [n for n in suite_mod.CI_SUBSET if n in available]
    if args.exprs:
        names = [n for n in names if suite_mod.matches(n, args.exprs)]
    return names


def short_error(text: str) -> str:
    """The exception lines of a (multi-process) traceback, for one-line reports."""
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if (
            (s.startswith("Process ") and "exited with error code" in s)
            or (s.startswith("rank ") and s.endswith(" failed:"))  # --launcher mpirun
            or (
                ("Error:" in s or "Exception:" in s or s.startswith("AssertionError"))
                and not s.startswith("File ")
            )
        ):
            keep.append(s)
    return " | ".join(keep[-6:]) if keep else text.strip().splitlines()[-1]


def outcome_line(outcome: str, seconds: float, detail: str) -> str:
    """What follows "test_x ... " once the test is done."""
    line = f"{outcome} ({seconds:.1f}s)"
    if detail and outcome != "passed":
        line += f": {detail if outcome == 'skipped' else short_error(detail)}"
    return line


class Result(unittest.TestResult):
    """Keeps outcomes and times for the report; with `echo`, prints one line per test."""

    def __init__(self, verbose: bool, echo: bool = True):
        super().__init__()
        self.verbose = verbose
        self.echo = echo
        self.records: list[dict] = []
        self._start = 0.0

    def startTest(self, test):  # noqa: N802 (unittest's API)
        super().startTest(test)
        self._start = time.monotonic()
        if self.echo:
            print(f"{test._testMethodName} ... ", end="", flush=True)

    def _record(self, test, outcome: str, detail: str = ""):
        elapsed = time.monotonic() - self._start
        self.records.append(
            {
                "test": test._testMethodName,
                "outcome": outcome,
                "seconds": round(elapsed, 2),
                "detail": detail,
            }
        )
        if not self.echo:
            return
        print(outcome_line(outcome, elapsed, detail), flush=True)
        if self.verbose and outcome in ("failed", "error") and detail:
            print(detail, flush=True)

    def addSuccess(self, test):  # noqa: N802 (unittest's API)
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):  # noqa: N802 (unittest's API)
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802 (unittest's API)
        super().addError(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802 (unittest's API)
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):  # noqa: N802 (unittest's API)
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):  # noqa: N802 (unittest's API)
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def print_header(info: dict, args: argparse.Namespace, count: int) -> None:
    print(
        f"backend {info['backend']} (package {info['package']}), world size "
        f"{info['world_size']}, {count} tests, subset {args.subset}, "
        f"start method {info['start_method']}, torch {info['torch']}",
        flush=True,
    )
    if info["skip_collective"]:
        print(f"skip_collective: {info['skip_collective']}", flush=True)


def finish(
    suite_mod, info: dict, args: argparse.Namespace, records: list[dict], elapsed: float
) -> list[str]:
    """Prints the summary, writes --report; returns the failed tests."""
    counts = Counter(r["outcome"] for r in records)
    failed = [r["test"] for r in records if r["outcome"] == "failed"]
    if failed:
        print("\nfailed: " + " ".join(failed))
        print(f"the ranks' output is in {args.logs}")
    print(
        f"\n{counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {elapsed:.0f}s",
        flush=True,
    )
    if args.report:
        with open(args.report, "w") as f:
            json.dump(
                {
                    **info,
                    "subset": args.subset,
                    "seconds": round(elapsed, 1),
                    "results": [{**r, "category": suite_mod.category(r["test"])} for r in records],
                },
                f,
                indent=1,
            )
    return failed


# --------------------------------------------------------------------------
# --launcher mpirun: this script runs again as each rank of one MPI job.
# --------------------------------------------------------------------------


def mpirun_command(spec: str) -> list[str]:
    """The MPI launcher and its options: `spec` if given, else the mpirun beside
    this Python (pip install mpich puts it there), else the first on the PATH."""
    if spec:
        return shlex.split(spec)
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    mpirun = beside if os.path.isfile(beside) else shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("no mpirun found: pip install mpich, or pass --mpirun COMMAND")
    version = subprocess.run(
        [mpirun, "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    if "Open MPI" in version or "OpenRTE" in version:  # more ranks than cores is fine here
        return [mpirun, "--oversubscribe", *(["--allow-run-as-root"] if os.geteuid() == 0 else [])]
    return [mpirun]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_mpirun(args: argparse.Namespace, argv: list[str]) -> int:
    """Runs this script as WORLD_SIZE ranks under mpirun and waits for them.

    The ranks share a TEMP_DIR (some tests meet in files there) and a TCPStore
    that rank 0 hosts; rank 0 prints the results and writes status.json in the
    logs folder. The run is killed after --run-timeout seconds, or EXIT_GRACE
    seconds after rank 0 reported if mpirun has not exited by then.
    """
    temp = tempfile.mkdtemp(prefix="pytorch_suite_")
    for sub in ("barrier", "test_dir", "init_dir"):  # as initialize_temp_directories makes
        os.mkdir(os.path.join(temp, sub))
    status = os.path.join(args.logs, "status.json")
    if os.path.exists(status):
        os.remove(status)
    env = {
        **os.environ,
        "TEMP_DIR": temp,
        "INIT_METHOD": "file://" + os.path.join(temp, "init_dir", "shared_init_file"),
        "PYTORCH_SUITE_STORE": f"127.0.0.1:{free_port()}",
        "PYTORCH_SUITE_STATUS": status,
    }
    report = ["--report", os.path.abspath(args.report)] if args.report else []
    command = [
        *mpirun_command(args.mpirun),
        "-n",
        str(args.world_size),
        sys.executable,
        os.path.abspath(__file__),
        *argv,
        "--logs",
        args.logs,
        *report,
    ]
    # SIGTERM (a CI job's timeout) ends mpirun too, through the finally below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # A session of its own: killpg ends mpirun and its ranks.
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + args.run_timeout
    reported_at = None
    why = ""
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            now = time.monotonic()
            if reported_at is None and os.path.exists(status):
                reported_at = now
            if now > deadline:
                why = f"the run did not finish within --run-timeout {args.run_timeout} s"
            elif reported_at is not None and now > reported_at + EXIT_GRACE:
                why = f"mpirun had not exited {EXIT_GRACE} s after rank 0 reported"
            if why:
                stop(proc)
    finally:
        if proc.poll() is None:
            stop(proc)
        shutil.rmtree(temp, ignore_errors=True)
    if why:
        print(f"killed mpirun: {why}", file=sys.stderr)
    if not os.path.exists(status):
        for log in sorted(glob.glob(os.path.join(args.logs, "rank*.log"))):
            with open(log, errors="replace") as f:
                tail = f.readlines()[-15:]
            print(f"--- the end of {log}:\n{''.join(tail)}", file=sys.stderr)
        print(
            f"rank 0 did not report (mpirun exit status {proc.returncode}); "
            f"the ranks' output is in {args.logs}",
            file=sys.stderr,
        )
        return 1
    with open(status) as f:
        code = json.load(f)["exit"]
    if proc.returncode != 0 and not why:
        print(f"note: mpirun exited with status {proc.returncode}", file=sys.stderr)
    return code


def stop(proc: subprocess.Popen) -> None:
    """Ends mpirun and its ranks: SIGTERM, then SIGKILL after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            pass


def launcher_rank() -> tuple[int, int]:
    """(rank, world size) as mpirun set them."""
    for rank, size in LAUNCHER_VARIABLES:
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    raise SystemExit(
        "--launcher mpirun: no rank in the environment (PMI_RANK, OMPI_COMM_WORLD_RANK); "
        "is this MPI's mpirun?"
    )


def merge(records: list[dict]) -> dict:
    """One test's outcome over all ranks: failed if it failed on any (with
    every failed rank's traceback), else rank 0's, as MultiProcessTestCase does."""
    failed = [(r, rec) for r, rec in enumerate(records) if rec["outcome"] == "failed"]
    if not failed:
        return records[0]
    detail = "\n".join(f"rank {r} failed:\n{rec['detail']}" for r, rec in failed)
    return {**records[0], "outcome": "failed", "detail": detail}


def redirect_output(log: str) -> TextIO:
    """Sends this process's stdout and stderr (its C++ libraries' too) to
    `log`; returns the stdout it had, for rank 0's report."""
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return out


def leave(code: int) -> NoReturn:
    """Exits at once, without atexit handlers, so without MPI_Finalize.

    MPICH's MPI_Finalize waits for every rank, and mpirun kills the ranks
    still running when one exits without it. A generated MPI backend skips it
    while MPI still runs a collective it gave up on (test_barrier_timeout_group
    leaves one on purpose), so the ranks that do call it would be killed:
    exiting alike, none is.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_rank(args: argparse.Namespace, suite_mod) -> NoReturn:
    """One rank of an mpirun run: joins the default group once, runs every
    selected test in order, and meets the other ranks after each one (rank 0
    prints the merged outcome). After a test that failed on some rank, every
    rank re-creates its process groups, so that a collective given up on
    (which MPI cannot cancel) does not fail the tests after it. Exits rather
    than returns (see leave)."""
    import torch.distributed as dist

    rank, size = launcher_rank()
    if size != args.world_size:
        raise SystemExit(f"mpirun started {size} ranks, --world-size is {args.world_size}")
    out = redirect_output(os.path.join(args.logs, f"rank{rank}.log"))

    def say(text: str, end: str = "\n") -> None:
        if rank == 0:
            print(text, end=end, file=out, flush=True)

    host, port = os.environ["PYTORCH_SUITE_STORE"].rsplit(":", 1)
    store = dist.TCPStore(
        host, int(port), size, is_master=rank == 0, timeout=timedelta(seconds=args.timeout)
    )

    def join(generation: int) -> None:
        """The default group, over the run's store (a fresh prefix each time)."""
        dist.init_process_group(
            args.backend,
            store=dist.PrefixStore(f"default_pg{generation}", store),
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=suite_mod.default_pg_timeout),
        )

    generation = 0
    join(generation)
    sync = suite_mod.RankSync(store, rank, size)
    cls = suite_mod.TestInProcess
    cls.sync = sync
    names = select(suite_mod, args)
    info = {**suite_mod.describe(), "launcher": "mpirun"}
    if rank == 0:
        with contextlib.redirect_stdout(out):
            print_header(info, args, len(names))
    result = Result(args.verbose, echo=False)
    records: list[dict] = []
    complete = True
    started = time.monotonic()
    for name in names:
        say(f"{name} ... ", end="")
        print(f"===== {name}", file=sys.stderr, flush=True)
        began = time.monotonic()
        cls.key = f"{name}/"
        cls(name).run(result)
        mine = result.records.pop() if result.records else {"test": name, "outcome": "failed"}
        mine.setdefault("detail", "the test reported no outcome")
        try:
            everyone = sync.exchange(f"{name}/result", json.dumps(mine), args.timeout)
            record = merge([json.loads(v) for v in everyone])
        except TimeoutError as e:  # a rank hangs or died: the others cannot go on
            complete = False
            record = {**mine, "outcome": "failed", "detail": f"TimeoutError: {e}\n{mine['detail']}"}
        record["seconds"] = round(time.monotonic() - began, 2)
        records.append(record)
        say(outcome_line(record["outcome"], record["seconds"], record["detail"]))
        if args.verbose and record["outcome"] == "failed":
            say(record["detail"])
        if complete and (record["outcome"] == "failed" or not dist.is_initialized()):
            # Creating a group is collective (MPI cannot time it out): only
            # once every rank is known to be here.
            try:
                sync.exchange(f"{name}/rejoin", "", args.timeout)
            except TimeoutError as e:
                complete = False
                say(f"the ranks could not meet to re-create their groups: {e}")
            if complete:
                if dist.is_initialized():
                    dist.destroy_process_group()
                generation += 1
                join(generation)
        if not complete:
            break
    elapsed = time.monotonic() - started
    failed = [r["test"] for r in records if r["outcome"] == "failed"]
    code = 2 if not names else 1 if failed or not complete else 0
    if rank == 0:
        with contextlib.redirect_stdout(out):
            if not complete:
                print(f"\nstopped after {len(records)} of {len(names)} tests: a rank stopped")
            if names:
                finish(suite_mod, info, args, records, elapsed)
            else:
                print("no test selected")
        status = os.environ["PYTORCH_SUITE_STATUS"]
        with open(status + ".tmp", "w") as f:
            json.dump({"exit": code}, f)
        os.replace(status + ".tmp", status)
    if not complete:
        # Some rank is stuck or gone: leave once rank 0 has reported, without
        # a teardown that could wait for it (mpirun then ends the rest).
        deadline = time.monotonic() + 30
        status = os.environ["PYTORCH_SUITE_STATUS"]
        while not os.path.exists(status) and time.monotonic() < deadline:
            time.sleep(0.2)
        leave(1)
    # The launcher reads the outcome from rank 0's status file: a rank exits 0
    # once everyone has reported (mpirun would end the others at a non-zero exit).
    sync.exchange("end", "", args.timeout)
    dist.destroy_process_group()
    leave(0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    configure_environment(args)
    as_rank = args.launcher == "mpirun" and "PYTORCH_SUITE_STORE" in os.environ
    if args.launcher == "mpirun" and not as_rank and not args.list:
        return launch_mpirun(args, argv)
    import _suite_tests as suite_mod  # after the environment is set

    if as_rank:
        run_rank(args, suite_mod)

    if not args.verbose:  # "Started process N with pid P", twice a second
        logging.getLogger("torch.testing._internal.common_distributed").setLevel(logging.WARNING)

    names = select(suite_mod, args)
    info = {**suite_mod.describe(), "launcher": args.launcher}
    cls = suite_mod.TestBackendConformance

    if args.list:
        for n in names:
            notes = []
            if info["plugin"] and n in suite_mod.EXCEPTIONS and not args.no_exceptions:
                notes.append("exception: " + suite_mod.EXCEPTIONS[n])
            elif args.launcher == "mpirun" and n in suite_mod.IN_PROCESS_SKIPS:
                notes.append("in-process: skipped")
            if n in info["retargeted"]:
                notes.append("backend guard removed")
            if n in info["group_tests"]:
                notes.append("small-world skip removed")
            print(f"{n:70s} {suite_mod.category(n):22s} {'; '.join(notes)}".rstrip())
        per_cat = Counter(suite_mod.category(n) for n in names)
        print(f"{len(names)} tests: " + ", ".join(f"{c} {k}" for c, k in sorted(per_cat.items())))
        return 0

    if not names:
        print("no test selected", file=sys.stderr)
        return 2

    print_header(info, args, len(names))
    suite = unittest.TestSuite(cls(n) for n in names)
    result = Result(args.verbose)
    started = time.monotonic()
    suite.run(result)
    elapsed = time.monotonic() - started
    failed = finish(suite_mod, info, args, result.records, elapsed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
