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

Options: --subset ci (default, a quick subset covering every family) or full,
-k EXPR (substring or glob, repeatable), --list, --world-size N (default 3),
--report FILE.json, --no-group-tests; see conformance/README.md. Exit status 0
when no test failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import unittest
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


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
        help="seconds before a test's ranks are killed (default 180)",
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
    os.environ["PYTORCH_SUITE_START"] = args.start_method
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
        if (s.startswith("Process ") and "exited with error code" in s) or (
            ("Error:" in s or "Exception:" in s or s.startswith("AssertionError"))
            and not s.startswith("File ")
        ):
            keep.append(s)
    return " | ".join(keep[-6:]) if keep else text.strip().splitlines()[-1]


class Result(unittest.TestResult):
    """Prints one line per test and keeps outcomes and times for the report."""

    def __init__(self, verbose: bool):
        super().__init__()
        self.verbose = verbose
        self.records: list[dict] = []
        self._start = 0.0

    def startTest(self, test):  # noqa: N802 (unittest's API)
        super().startTest(test)
        self._start = time.monotonic()
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
        line = f"{outcome} ({elapsed:.1f}s)"
        if detail and outcome != "passed":
            line += f": {detail if outcome == 'skipped' else short_error(detail)}"
        print(line, flush=True)
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_environment(args)
    import _suite_tests as suite_mod  # after the environment is set

    if not args.verbose:  # "Started process N with pid P", twice a second
        logging.getLogger("torch.testing._internal.common_distributed").setLevel(logging.WARNING)

    names = select(suite_mod, args)
    info = suite_mod.describe()
    cls = suite_mod.TestBackendConformance

    if args.list:
        for n in names:
            notes = []
            if info["plugin"] and n in suite_mod.EXCEPTIONS and not args.no_exceptions:
                notes.append("exception: " + suite_mod.EXCEPTIONS[n])
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

    print(
        f"backend {info['backend']} (package {info['package']}), world size "
        f"{info['world_size']}, {len(names)} tests, subset {args.subset}, "
        f"start method {info['start_method']}, torch {info['torch']}",
        flush=True,
    )
    if info["skip_collective"]:
        print(f"skip_collective: {info['skip_collective']}", flush=True)

    suite = unittest.TestSuite(cls(n) for n in names)
    result = Result(args.verbose)
    started = time.monotonic()
    suite.run(result)
    elapsed = time.monotonic() - started

    counts = Counter(r["outcome"] for r in result.records)
    failed = [r["test"] for r in result.records if r["outcome"] == "failed"]
    if failed:
        print("\nfailed: " + " ".join(failed))
        print(f"the ranks' output is in {args.logs}")
    print(
        f"\n{counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {elapsed:.0f}s"
    )
    if args.report:
        with open(args.report, "w") as f:
            json.dump(
                {
                    **info,
                    "subset": args.subset,
                    "seconds": round(elapsed, 1),
                    "results": [
                        {**r, "category": suite_mod.category(r["test"])} for r in result.records
                    ],
                },
                f,
                indent=1,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
