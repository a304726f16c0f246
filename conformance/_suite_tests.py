"""The test class of the PyTorch conformance harness (see pytorch_suite.py).

This module is configured entirely by environment variables, because the
processes that run each test import it again: under "spawn" every rank is a
fresh interpreter that unpickles ``TestBackendConformance._run`` and so imports
this module before anything else runs; under "forkserver" the server imports
it once and forks the ranks. Doing the plugin setup at import time therefore
registers the backend in every rank as well as in the parent. pytorch_suite.py
sets these variables and then imports the module:

  BACKEND                the torch.distributed backend to test ("gloo", "plug", ...)
  WORLD_SIZE             the number of ranks of each test
  PYTORCH_SUITE_PACKAGE  the Python package that registers BACKEND on import
                         (a generated project's NAME_collectives); empty for a
                         backend built into torch
  PYTORCH_SUITE_START    how ranks start: "forkserver" (the default: ranks fork
                         from a server process that imported this module once),
                         "spawn" (PyTorch's own way: every rank imports torch
                         and this module afresh) or "fork" (from the runner);
                         "mpirun" under --launcher mpirun (TestInProcess)
  PYTORCH_SUITE_GROUP_TESTS  "1": run the subgroup tests PyTorch skips below
                         world size 8 (see _unwrap_small_world)
  PYTORCH_SUITE_NO_EXCEPTIONS  "1": run the tests on EXCEPTIONS too (their
                         backend guards lifted like the others')
  PYTORCH_SUITE_LOGS     a folder for the ranks' output, one file per test and
                         rank (unset: the ranks write to the terminal)
  TEMP_DIR, INIT_METHOD  what distributed_test.py reads; set here when missing
                         (TestDistBackend.setUp makes a fresh TEMP_DIR per test)

Under ``--launcher mpirun`` no rank is spawned per test: mpirun starts
WORLD_SIZE copies of pytorch_suite.py, and each imports this module, joins one
process group and runs every test in ``TestInProcess``.

The order matters, and follows the recipe torch_ucc used for its plugin: import
the package (registers the backend), then add the backend to
DistTestCases.backend_feature / skip_collective, and only then import
distributed_test, whose decorators read those sets when the module is imported.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import re
import sys
import tempfile
import types
import unittest
from datetime import timedelta

# --------------------------------------------------------------------------
# What the harness runs: the collective, point-to-point and group tests of
# DistributedTest._DistTestBase. Tests are sorted into families by name; the
# first matching pattern wins. Anything not matched, or matched by
# OUT_OF_SCOPE, is not run (DDP, models, autograd, profiler, GPU, NCCL-only).
# --------------------------------------------------------------------------

CATEGORIES: list[tuple[str, str]] = [
    ("object", r"^test_.*_object"),
    ("all_reduce_coalesced", r"^test_all_reduce_coalesced"),
    ("all_reduce", r"^test_(all_reduce|sparse_all_reduce)"),
    ("all_gather_coalesced", r"^test_all_gather_coalesced"),
    ("all_gather", r"^test_all_gather"),
    ("reduce_scatter", r"^test_reduce_scatter"),
    ("reduce", r"^test_reduce"),
    ("broadcast", r"^test_broadcast"),
    ("gather", r"^test_gather"),
    ("scatter", r"^test_scatter"),
    ("all_to_all", r"^test_all_to_all"),
    ("batch_isend_irecv", r"^test_batch_isend_irecv"),
    ("send_recv", r"^test_(send_recv|isend|irecv)"),
    ("barrier", r"^test_(barrier|monitored_barrier)"),
    ("coalescing", r"^test_coalescing_manager"),
    ("work", r"^test_get_future$"),
    ("groups", r"^test_(new_subgroups|destroy_|get_rank|get_backend$|Backend_enum_class$)"),
]

OUT_OF_SCOPE = re.compile(r"cuda|nccl|gpu|profiler|ddp|DistributedDataParallel")

# Guards by backend name. DistributedTest skips some tests for every backend
# but gloo (or but gloo, nccl and mpi) although their body uses nothing but the
# public torch.distributed API on CPU tensors. For a plugin backend the harness
# removes exactly such a guard (matched by its skip reason) and runs the body;
# other decorators (world size, OS, GPU) stay in force. Tests on EXCEPTIONS are
# skipped instead (with --no-exceptions they are lifted too). Entries are skip
# reasons, or their start.
BACKEND_GUARDS: list[str] = [
    "Test requires backend {backend} to be one of",  # @require_backend_is_available
    "GLOO Batch Send Recv CPU",
    "get_future is only supported on mpi, nccl and gloo",
    "Only gloo backend supports timeouts",
]

# The CPU all_to_all tests run for MPI only: gloo has no all_to_all of tensor
# lists. A plugin that implements the op runs them too; gloo skips them, so
# they are beyond the gloo baseline.
OP_GUARDS: dict[str, str] = {
    "Only MPI supports all_to_all": "alltoall",
    "Only MPI supports CPU all_to_all_single": "alltoall_base",
}

# Unless --no-group-tests, the harness removes @skip_if_small_worldsize, which
# skips the subgroup tests (a group of ranks 1 and 2, rank 0 outside it) below
# world size 8 for every backend but MPI; common_distributed itself calls those
# tests "always skipped". They run at world size 3, and gloo passes them.

# Tests gloo passes that cannot apply to a backend plugged in through
# torch.distributed.Backend.register_backend, each with the reason. The harness
# reports them as skipped, with the reason, for every backend torch does not
# build in. A failure that is the backend's fault does not belong here.
EXCEPTIONS: dict[str, str] = {
    "test_sparse_all_reduce_sum": (
        "sparse all_reduce (c10d allreduce_sparse) is outside the catalogue: no "
        "generated backend overrides it; torch guards the test with BACKEND == gloo"
    ),
    "test_monitored_barrier_gloo": (
        "monitored_barrier is a gloo-only debugging API (Backend::monitoredBarrier), "
        "outside the catalogue; the test requires BACKEND == gloo"
    ),
    "test_monitored_barrier_gloo_subgroup": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
    "test_monitored_barrier_gloo_rank_0_timeout": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
    "test_monitored_barrier_failure_order": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
    "test_monitored_barrier_wait_all_ranks": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
    "test_monitored_barrier_allreduce_hang": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
    "test_monitored_barrier_allreduce_hang_wait_all_ranks": (
        "monitored_barrier is a gloo-only debugging API, outside the catalogue"
    ),
}

# Tests that cannot run in-process (--launcher mpirun), where every test of a
# run shares one process per rank and one default process group, as PyTorch
# ran this suite for its MPI backend. The harness skips them there, with the
# reason.
_CLOSES_GLOO = (
    "ranks fail a monitored_barrier on the default process group on purpose, which leaves "
    "gloo's connections closed for every later test (gloo only: a plugin skips it as an "
    "exception)"
)
IN_PROCESS_SKIPS: dict[str, str] = {
    "test_barrier_timeout_global": (
        "destroys the default process group and re-creates it with a 1 s timeout, then "
        "leaves a barrier only rank 0 joined on it: the tests after it would inherit both "
        "(PyTorch skipped it for MPI: 'Only gloo backend supports timeouts')"
    ),
    "test_monitored_barrier_gloo": _CLOSES_GLOO,
    "test_monitored_barrier_failure_order": _CLOSES_GLOO,
    "test_monitored_barrier_wait_all_ranks": _CLOSES_GLOO,
}

# The CI subset: a few tests per family, chosen to cover every collective, the
# object collectives, point-to-point (blocking, async, tagged, any source,
# batched), barriers, work futures and groups (subgroup and full group).
CI_SUBSET: list[str] = [
    "test_all_reduce_sum",
    "test_all_reduce_max",
    "test_all_reduce_group_product",
    "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex",
    "test_all_reduce_complex_unsupported_ops",
    "test_all_reduce_coalesced_sum",
    "test_all_reduce_coalesced_group_min",
    "test_broadcast",
    "test_broadcast_group",
    "test_reduce_sum",
    "test_reduce_full_group_max",
    "test_all_gather",
    "test_all_gather_group",
    "test_all_gather_coalesced_simple",
    "test_gather",
    "test_gather_checks",
    "test_scatter",
    "test_scatter_group",
    "test_all_to_all",
    "test_all_to_all_single_unequal_split",
    "test_all_to_all_single_equal_split_group",
    "test_all_gather_object_default_pg",
    "test_all_gather_object_subgroup",
    "test_scatter_object_list",
    "test_send_recv",
    "test_send_recv_with_tag",
    "test_send_recv_any_source",
    "test_isend",
    "test_irecv",
    "test_batch_isend_irecv_gloo_tags",
    "test_barrier",
    "test_barrier_full_group",
    "test_get_future",
    "test_get_backend",
    "test_get_rank_size_group",
    "test_destroy_group",
]

BUILTIN_BACKENDS = {"gloo", "nccl", "mpi", "ucc", "xccl"}

# What a generated package's OPS list lacks -> the DistTestCases.skip_collective
# key that makes distributed_test skip the tests needing it.
SKIP_COLLECTIVE_FOR_OP = {
    "allgather_coalesced": "allgather_coalesced",
    "reduce": "reduce",
    "recvAnysource": "sendrecv anysource",
    "barrier": "cpu barrier",
}


def category(name: str) -> str | None:
    """The family of test `name`, or None when it is out of scope."""
    if OUT_OF_SCOPE.search(name):
        return None
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name):
            return cat
    return None


def matches(name: str, exprs: list[str]) -> bool:
    """-k: a glob (with * ? [) or a substring; any of `exprs` selects."""
    for expr in exprs:
        if any(c in expr for c in "*?["):
            if fnmatch.fnmatchcase(name, expr):
                return True
        elif expr in name:
            return True
    return False


# --------------------------------------------------------------------------
# Plugin setup, at import time (runs in the parent and in every rank).
# --------------------------------------------------------------------------

BACKEND = os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "3")
PACKAGE = os.environ.get("PYTORCH_SUITE_PACKAGE", "")
START_METHOD = os.environ.get("PYTORCH_SUITE_START", "forkserver")
GROUP_TESTS = os.environ.get("PYTORCH_SUITE_GROUP_TESTS", "") == "1"
APPLY_EXCEPTIONS = os.environ.get("PYTORCH_SUITE_NO_EXCEPTIONS", "") != "1"
IS_PLUGIN = BACKEND not in BUILTIN_BACKENDS

if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="pytorch_suite_")
# test_barrier_timeout_global re-initialises from INIT_METHOD and runs only with
# a file:// one; TestDistBackend.setUp points it at a fresh file for each test.
os.environ.setdefault(
    "INIT_METHOD", "file://" + os.path.join(os.environ["TEMP_DIR"], "shared_init_file")
)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

PLUGIN_OPS: list[str] | None = None
if PACKAGE:
    _package = importlib.import_module(PACKAGE)  # registers the backend
    PLUGIN_OPS = list(getattr(_package, "OPS", [])) or None
if BACKEND not in dist.Backend.backend_list:
    raise RuntimeError(
        f"backend {BACKEND!r} is not registered with torch.distributed"
        + (
            f" (importing {PACKAGE} did not register it)"
            if PACKAGE
            else " (pass --package NAME_collectives, the package that registers it)"
        )
    )

from torch.testing._internal.common_distributed import (  # noqa: E402
    TEST_SKIPS,
    DistTestCases,
    skip_if_small_worldsize,
)
from torch.testing._internal.common_utils import TestCase  # noqa: E402

if IS_PLUGIN:
    DistTestCases.backend_feature["plugin"].add(BACKEND)
    # Process groups of any subset of ranks: torch creates one backend per
    # group through the registered creator.
    DistTestCases.backend_feature["subgroup"].add(BACKEND)
    if PLUGIN_OPS is not None:
        for op, key in SKIP_COLLECTIVE_FOR_OP.items():
            if op not in PLUGIN_OPS:
                DistTestCases.skip_collective.setdefault(key, set()).add(BACKEND)

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
    default_pg_timeout,
)


def _skip_reason(func) -> str | None:
    return (
        getattr(func, "__unittest_skip_why__", None)
        if getattr(func, "__unittest_skip__", False)
        else None
    )


def _lifted_guard(func) -> str | None:
    """The backend guard of `func` that a plugin backend may lift, if any."""
    reason = _skip_reason(func)
    if reason is None:
        return None
    for guard in BACKEND_GUARDS:
        if reason.startswith(guard.format(backend=BACKEND)):
            return reason
    op = OP_GUARDS.get(reason)
    if op is not None and (PLUGIN_OPS is None or op in PLUGIN_OPS):
        return reason
    return None


def _with_skip(func: types.FunctionType, reason: str) -> types.FunctionType:
    """A copy of `func` that unittest skips with `reason`, before any rank starts."""
    copy = types.FunctionType(
        func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    copy.__dict__.update(func.__dict__)
    copy.__qualname__ = func.__qualname__
    copy.__unittest_skip__ = True
    copy.__unittest_skip_why__ = reason
    return copy


def _unskip(func: types.FunctionType) -> types.FunctionType:
    """`func` without its static skip (set by the decorator applied last). A
    skip that an inner decorator set before a wrapper copied it (say
    @require_exact_world_size under @with_dist_debug_levels) stays."""
    copy = types.FunctionType(
        func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    copy.__dict__.update(
        {k: v for k, v in func.__dict__.items() if not k.startswith("__unittest_skip")}
    )
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    inner = getattr(func, "__wrapped__", None)
    while inner is not None:
        reason = _skip_reason(inner)
        if reason is not None:
            copy.__unittest_skip__ = True
            copy.__unittest_skip_why__ = reason
            break
        inner = getattr(inner, "__wrapped__", None)
    return copy


_SMALL_WORLD_CODE = skip_if_small_worldsize(lambda: None).__code__


def _unwrap_small_world(func: types.FunctionType) -> types.FunctionType | None:
    """`func` without an outermost @skip_if_small_worldsize; None if it has none.
    Static skips set on the wrapper (by decorators above it) are kept."""
    if getattr(func, "__code__", None) is not _SMALL_WORLD_CODE:
        return None
    inner = func.__wrapped__
    copy = types.FunctionType(
        inner.__code__, inner.__globals__, inner.__name__, inner.__defaults__, inner.__closure__
    )
    copy.__dict__.update({k: v for k, v in func.__dict__.items() if k != "__wrapped__"})
    copy.__qualname__ = inner.__qualname__
    copy.__doc__ = inner.__doc__
    return copy


RETARGETED: list[str] = []
UNSKIPPED_SMALL_WORLD: list[str] = []


class TestBackendConformance(TestDistBackend, DistributedTest._DistTestBase):
    """PyTorch's DistributedTest._DistTestBase against os.environ["BACKEND"]."""

    def setUp(self):
        super().setUp()  # a fresh TEMP_DIR and INIT_METHOD for this test
        if START_METHOD == "spawn":
            self._spawn_processes()
        else:
            ctx = torch.multiprocessing.get_context(START_METHOD)
            if START_METHOD == "forkserver":
                # The server imports this module once (registering the backend)
                # and forks every rank from that clean process.
                ctx.set_forkserver_preload([__name__])
            self._start_processes(ctx.Process)

    def _start_processes(self, proc) -> None:
        # MultiProcessTestCase._start_processes, passing this test's TEMP_DIR
        # and INIT_METHOD: a forkserver's ranks inherit the server's
        # environment, not the one setUp just made.
        env = {k: os.environ[k] for k in ("TEMP_DIR", "INIT_METHOD")}
        self.processes = []
        for rank in range(int(self.world_size)):
            parent_conn, child_conn = torch.multiprocessing.Pipe()
            process = proc(
                target=self.__class__._run,
                name="process " + str(rank),
                args=(rank, self._current_test_name(), self.file_name, child_conn),
                kwargs={"env": env},
            )
            process.start()
            self.pid_to_pipe[process.pid] = parent_conn
            self.processes.append(process)

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, env=None, **kwargs):
        if env:
            os.environ.update(env)
        logs = os.environ.get("PYTORCH_SUITE_LOGS")
        if logs:
            # The ranks' own output (C++ warnings, profiler chatter, the
            # tracebacks they log) goes to one file per test and rank.
            sys.stdout.flush()
            sys.stderr.flush()
            fd = os.open(
                os.path.join(logs, f"{test_name}.rank{rank}.log"),
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                0o644,
            )
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        # distributed_test read INIT_METHOD when it was imported, which under
        # fork or forkserver was before this test made its own.
        distributed_test.INIT_METHOD = os.environ["INIT_METHOD"]
        super()._run(rank, test_name, file_name, pipe, **kwargs)


class RankSync:
    """Keeps the ranks of an mpirun run in step through a TCPStore.

    Every rank posts a value under a key and waits for everyone's. It needs no
    process group, so it works whatever state a failed test left them in; keys
    are never reused, so ranks that fell out of step in one test (one failed
    before a barrier the others reached) are back in step at the next key.
    """

    def __init__(self, store: dist.Store, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size

    def exchange(self, key: str, value: str, timeout: float) -> list[str]:
        """Every rank's `value` for `key`, in rank order.

        Raises TimeoutError naming the ranks that did not post it within
        `timeout` seconds.
        """
        keys = [f"{key}/{r}" for r in range(self.world_size)]
        self.store.set(keys[self.rank], value)
        try:
            self.store.wait(keys, timedelta(seconds=timeout))
        except RuntimeError:  # DistStoreError: some rank did not post in time
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            if missing:
                raise TimeoutError(
                    f"rank(s) {', '.join(map(str, missing))} did not reach {key} "
                    f"within {timeout:.0f} s"
                ) from None
        return [self.store.get(k).decode() for k in keys]


SKIP_EXIT_CODES = {skip.exit_code: skip.message for skip in TEST_SKIPS.values()}


class TestInProcess(TestCase, DistributedTest._DistTestBase):
    """The same tests, run in this process on the process group it joined.

    This is how PyTorch ran DistributedTest for MPI (``mpiexec -n 3`` of a
    ``TestCase, _DistTestBase`` class): the runner (pytorch_suite.py, under
    --launcher mpirun) initialises the default group once and runs the tests
    in the same order on every rank, setting ``sync`` and ``key`` first.
    """

    sync: RankSync | None = None  # set by the runner
    key = ""  # a prefix unique to this test in this run, set by the runner

    def setUp(self) -> None:
        super().setUp()  # seeds the RNGs alike on every rank, as spawned ranks are
        self.rank = dist.get_rank()
        self._barriers = 0
        self._environ = dict(os.environ)

    def tearDown(self) -> None:
        # Tests set variables they do not reset (@with_dist_debug_levels leaves
        # TORCH_DISTRIBUTED_DEBUG at its last level): later tests must not see them.
        os.environ.clear()
        os.environ.update(self._environ)
        dist.set_debug_level_from_env()
        super().tearDown()

    @property
    def world_size(self) -> str:
        """As TestDistBackend has it (a string)."""
        return os.environ["WORLD_SIZE"]

    def _barrier(self, *args, **kwargs) -> None:
        """Every rank reaches this point: through the store, not the file barrier
        (``wait_for`` and ``timeout`` are ignored: all ranks, the group timeout)."""
        assert self.sync is not None, "TestInProcess runs under the mpirun runner only"
        self._barriers += 1
        try:
            self.sync.exchange(f"{self.key}barrier{self._barriers}", "", default_pg_timeout)
        except TimeoutError as e:
            raise RuntimeError(f"barrier timeout: {e}") from None

    def _callTestMethod(self, method) -> None:  # noqa: N802 (unittest's API)
        # Decorators such as @skip_if_lt_x_gpu skip a spawned rank by exiting
        # with a code from TEST_SKIPS; here that is a skip.
        try:
            method()
        except SystemExit as e:
            if e.code in SKIP_EXIT_CODES:
                raise unittest.SkipTest(SKIP_EXIT_CODES[e.code]) from None
            raise RuntimeError(f"the test called sys.exit({e.code!r})") from None


def _patch_tests() -> None:
    base = DistributedTest._DistTestBase.__dict__
    for name in sorted(n for n in base if n.startswith("test_") and category(n)):
        func = base[name]
        if GROUP_TESTS:
            unwrapped = _unwrap_small_world(func)
            if unwrapped is not None:
                func = unwrapped
                UNSKIPPED_SMALL_WORLD.append(name)
        if IS_PLUGIN and name in EXCEPTIONS and APPLY_EXCEPTIONS:
            func = _with_skip(func, "exception: " + EXCEPTIONS[name])
        elif IS_PLUGIN and _lifted_guard(func):
            func = _unskip(func)
            RETARGETED.append(name)
        if func is not base[name]:
            setattr(TestBackendConformance, name, func)
            setattr(TestInProcess, name, func)
        if name in IN_PROCESS_SKIPS and not getattr(func, "__unittest_skip__", False):
            setattr(TestInProcess, name, _with_skip(func, "in-process: " + IN_PROCESS_SKIPS[name]))


_patch_tests()


def all_tests() -> list[str]:
    return sorted(n for n in dir(TestBackendConformance) if n.startswith("test_"))


def in_scope() -> list[str]:
    return [n for n in all_tests() if category(n) is not None]


def describe() -> dict:
    """The setup as applied in this process (for --list and the report)."""
    return {
        "backend": BACKEND,
        "package": PACKAGE or None,
        "package_file": getattr(sys.modules.get(PACKAGE), "__file__", None) if PACKAGE else None,
        "world_size": int(os.environ["WORLD_SIZE"]),
        "start_method": START_METHOD,
        "plugin": IS_PLUGIN,
        "ops": PLUGIN_OPS,
        "skip_collective": {
            k: sorted(v) for k, v in DistTestCases.skip_collective.items() if BACKEND in v
        },
        "retargeted": RETARGETED,
        "group_tests": UNSKIPPED_SMALL_WORLD,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    unittest.main()
