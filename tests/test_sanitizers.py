"""The generated store runtime under sanitizers (issue 9, "Sanitizers in CI").

AddressSanitizer and UndefinedBehaviorSanitizer: a store project with every
op, built with ``CFLAGS``/``LDFLAGS`` ``-fsanitize=address,undefined`` (the
generated README's build section says how), runs its own runtime and failure
tests with the sanitizer runtimes preloaded into Python and so into every rank
the harness spawns. No report may touch the project's own code: a report
naming a ``csrc/`` file or the project's extension fails the test.

The ucx receive path (receives completed later, given up on mid-message)
runs under ASan and UBSan too: an ``--impl ucx`` project built the same way
runs its receive tests. Skipped without UCX (pkg-config ucx).

ThreadSanitizer: ``sanitizers/tsan_runtime.cpp`` drives the runtime (queue,
Work, Runtime, Library, teardown) from C++ threads, the ranks of a group being
backends in one process over a HashStore, mirroring the generated concurrency
tests and checking the runtime's guarantees. It is compiled with the
project's sources (as setup.py lists them, but the Python bindings) and
``-fsanitize=thread`` and linked with the uninstrumented libtorch;
``sanitizers/tsan.supp`` suppresses, with reasons, only what TSan cannot see
inside torch. It runs twice: as generated, and with ``kBodiesOnlyStart`` true
(the caller-driven path of the MPI implementation: bodies on the caller's
thread, callers polling their own ops).

Needs gcc's sanitizer runtimes (libasan, libubsan, libtsan: Debian's gcc has
them). Marked ``build``: two ASan builds, 9 store tests and 19 ucx receive
tests under ASan (at 3 ranks), two TSan compiles and runs: about 10.5 minutes
on two shared cores (7 before the ucx build and the caller-driven TSan run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Built, build, ucx_by_pkg_config
from new_backend import generate_project
from torch.utils import cpp_extension

pytestmark = [pytest.mark.build, pytest.mark.timeout(1800)]

HERE = Path(__file__).resolve().parent
TSAN_RUNS = 5
TSAN_CASES = 8  # the cases in tsan_runtime.cpp's main()
NAME = "san_store"  # tsan_runtime.cpp uses san_store_collectives::Backend
PACKAGE = f"{NAME}_collectives"
UCX_NAME = "san_ucx"

SANITIZE = "-fsanitize=address,undefined -fno-omit-frame-pointer"

#: The generated tests run under ASan and UBSan: those of test_runtime.py and
#: test_failures.py that take the runtime through teardown and failure (issue 9's
#: scenarios 1, 2a and 3, a killed rank, 8 threads while some ops fail, and the
#: store's key deletion over 10k ops). Left out, to stay within about 5 minutes
#: of CI: rendezvous methods, fork, torchrun, the profiler, and the timeouts
#: already covered by these (a rank that never joins, is stopped, or is late).
SELECTED = [
    "tests/test_runtime.py::test_destroy_from_a_future_callback",
    "tests/test_runtime.py::test_abort_and_shutdown_at_once_return_promptly",
    "tests/test_runtime.py::test_destroy_process_group_with_pending_work",
    "tests/test_failures.py::test_a_rank_killed_mid_collective",
    "tests/test_failures.py::test_eight_threads_while_some_ops_fail",
    "tests/test_failures.py::test_ranks_that_disagree_on_sizes_get_a_clear_error_then_the_group_refuses",
    "tests/test_failures.py::test_a_late_rank_after_a_failure_gets_errors_never_wrong_data",
    "tests/test_failures.py::test_a_send_never_waits_behind_queued_collectives",
    "tests/test_failures.py::test_store_does_not_grow_over_ten_thousand_ops",
]

#: What each sanitizer option is for.
ASAN_OPTIONS = {
    # CPython and torch keep memory until exit on purpose: leak reports would
    # all be theirs.
    "detect_leaks": "0",
    # One report file per process (asan.<pid>): the ranks are processes the
    # harness spawns, and their stderr does not reach this test.
    "log_path": "{logs}/asan",
}
UBSAN_OPTIONS = {
    "print_stacktrace": "1",  # a stack, to tell the project's reports from others
    "log_path": "{logs}/ubsan",  # as for ASan
}


def gcc_runtime(library: str) -> str:
    """The path of one of gcc's sanitizer runtimes; skips the test without it."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    found = subprocess.run([gcc, f"-print-file-name={library}"], capture_output=True, text=True)
    path = found.stdout.strip()
    if not os.path.isabs(path):
        pytest.skip(f"gcc has no {library}")
    return path


def options(values: dict[str, str], logs: Path) -> str:
    return ":".join(f"{key}={value.format(logs=logs)}" for key, value in values.items())


def sanitized_env(logs: Path, site: Path) -> dict[str, str]:
    """The environment of a Python whose every process runs with ASan and UBSan."""
    logs.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "LD_PRELOAD": f"{gcc_runtime('libasan.so')} {gcc_runtime('libubsan.so')}",
        "ASAN_OPTIONS": options(ASAN_OPTIONS, logs),
        "UBSAN_OPTIONS": options(UBSAN_OPTIONS, logs),
        "PYTHONPATH": str(site),
    }


def reports(logs: Path) -> list[str]:
    """Every sanitizer report written under ``logs``, one string each."""
    found = []
    for log in sorted(logs.iterdir()):
        text = log.read_text(errors="replace")
        # ASan writes one report per file and stops; UBSan goes on, one
        # "runtime error" per report.
        parts = re.split(r"(?m)^(?=\S*: runtime error: |=+\d+=+ERROR: )", text)
        reported = [part for part in parts if re.search(r"ERROR: |runtime error: ", part)]
        found += [f"{log.name}:\n{part}" for part in reported]
    return found


def touches_project(report: str, package: str = PACKAGE) -> bool:
    return "/csrc/" in report or f"{package}/_C" in report


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render-san")
    return generate_project(NAME, ops="all", impl="store", output_dir=out).target


def build_sanitized(rendered: Path, work: Path) -> Built:
    gcc_runtime("libasan.so")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CFLAGS", SANITIZE)
        patch.setenv("LDFLAGS", "-fsanitize=address,undefined")
        return build(rendered, work)


@pytest.fixture(scope="session")
def asan_built(rendered: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_sanitized(rendered, tmp_path_factory.mktemp("build-asan"))


def test_the_extension_is_instrumented(asan_built: Built) -> None:
    (extension,) = (asan_built.site / PACKAGE).glob("_C*.so")
    symbols = subprocess.run(["nm", "-D", str(extension)], capture_output=True, text=True).stdout
    assert "__asan_report" in symbols and "__ubsan_handle" in symbols


def test_reports_of_spawned_processes_are_collected(asan_built: Built, tmp_path: Path) -> None:
    """A child started like the harness's ranks (spawn) writes its report where the scan looks."""
    crash = (
        "import ctypes, multiprocessing as mp\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=ctypes.string_at, args=(8,))\n"
        "    p.start(); p.join()\n"
    )
    logs = tmp_path / "logs"
    env = sanitized_env(logs, asan_built.site)
    subprocess.run([sys.executable, "-c", crash], env=env, timeout=120)
    found = reports(logs)
    assert len(found) == 1 and "AddressSanitizer: SEGV" in found[0], found
    assert not touches_project(found[0])


def test_runtime_and_failure_tests_under_asan_and_ubsan(asan_built: Built, tmp_path: Path) -> None:
    project, logs = asan_built.project, tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *SELECTED, "-q", "-p", "no:cacheprovider"],
        cwd=project, env=sanitized_env(logs, asan_built.site),
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    found = reports(logs)
    ours = [report for report in found if touches_project(report)]
    assert not ours, f"{len(ours)} sanitizer reports in the project's code:\n\n" + "\n\n".join(ours)
    assert done.returncode == 0, done.stdout + done.stderr + "\n\n".join(found)
    assert f"{len(SELECTED)} passed" in done.stdout, done.stdout  # none renamed away


#: The ucx project's receive tests (test_failures.py: receives posted after a
#: waiting one, from any source, in order, timed out, given up on mid-message;
#: test_ops.py: by source, by tag, and recv/recvAnysource in the op matrix and
#: in the shapes test: zero elements, a strided 2-D column, an offset view):
#: 44 pass and 3 need 3 ranks (skipped), about 90 s under ASan.
UCX_SELECTED = ["tests/test_failures.py", "tests/test_ops.py", "-k", "recv or receive"]
#: At 3 ranks only (ucx's own suite runs 2 and 3): a rank under ASan starts in seconds.
UCX_WORLD_SIZES = "3"
UCX_SELECTED_COUNT = 19


def test_ucx_receives_under_asan_and_ubsan(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    if not ucx_by_pkg_config():
        pytest.skip("no UCX (pkg-config ucx): apt-get install libucx-dev")
    out = tmp_path_factory.mktemp("render-san-ucx")
    rendered = generate_project(UCX_NAME, ops="all", impl="ucx", output_dir=out).target
    built = build_sanitized(rendered, tmp_path_factory.mktemp("build-asan-ucx"))
    logs, package = tmp_path / "logs", f"{UCX_NAME}_collectives"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *UCX_SELECTED, "-q", "-p", "no:cacheprovider"],
        cwd=built.project,
        env={
            **sanitized_env(logs, built.site),
            f"{UCX_NAME.upper()}_TEST_WORLD_SIZES": UCX_WORLD_SIZES,
        },
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    found = reports(logs)
    ours = [report for report in found if touches_project(report, package)]
    assert not ours, f"{len(ours)} sanitizer reports in the project's code:\n\n" + "\n\n".join(ours)
    assert done.returncode == 0, done.stdout + done.stderr + "\n\n".join(found)
    assert f"{UCX_SELECTED_COUNT} passed" in done.stdout, done.stdout  # none renamed away


def caller_driven(csrc: Path, out: Path) -> Path:
    """A copy of the store project's csrc/ with kBodiesOnlyStart true.

    The store's receive bookkeeping (postRecv, tryRecv) is its receive
    queue's thread's alone, which is why the store leaves kBodiesOnlyStart
    false; here callers poll their own receives, on threads of their own, so
    the copy serializes that bookkeeping with one lock, as a library safe on
    any thread (MPI at MPI_THREAD_MULTIPLE) is: what TSan reports then is the
    runtime's.
    """
    copy = out / "csrc"
    shutil.copytree(csrc, copy)
    ops = (copy / "ops.hpp").read_text()
    flag = "constexpr bool kBodiesOnlyStart = false;"
    assert ops.count(flag) == 1, "ops.hpp no longer declares kBodiesOnlyStart as expected"
    (copy / "ops.hpp").write_text(ops.replace(flag, flag.replace("false", "true")))
    exchange = (copy / "runtime" / "store_exchange.cpp").read_text()
    lock = "\n  const std::lock_guard<std::mutex> serialized(receivesMutex);"
    post = "uint64_t StoreExchange::postRecv(int src, int tag) {"
    tried = re.search(r"std::optional<int> StoreExchange::tryRecv\([^)]*\) \{", exchange)
    assert exchange.count(post) == 1 and tried, "store_exchange.cpp's postRecv or tryRecv changed"
    exchange = exchange[: tried.end()] + lock + exchange[tried.end() :]
    exchange = exchange.replace(post, "std::mutex receivesMutex;\n\n" + post + lock)
    (copy / "runtime" / "store_exchange.cpp").write_text("#include <mutex>\n" + exchange)
    return copy


def compile_tsan_runtime(csrc: Path, out: Path) -> Path:
    """tsan_runtime.cpp and the project's runtime, compiled with -fsanitize=thread."""
    flags = ["-std=c++20", "-fsanitize=thread", "-O1", "-g1", f"-I{csrc}"]
    flags += [f"-I{path}" for path in cpp_extension.include_paths()]
    # setup.py's sources but the bindings
    sources = [csrc / "runtime" / "runtime.cpp", *sorted(csrc.glob("*.cpp"))]
    sources.append(HERE / "sanitizers" / "tsan_runtime.cpp")
    compilers = [
        (source, subprocess.Popen(
            ["c++", *flags, "-c", str(source), "-o", str(out / f"{source.stem}.o")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
        for source in sources
    ]  # fmt: skip
    for source, compiler in compilers:
        log = compiler.communicate(timeout=1200)[0]
        assert compiler.returncode == 0, f"compiling {source.name}:\n{log}"
    binary = out / "tsan_runtime"
    objects = [str(out / f"{source.stem}.o") for source in sources]
    libdirs = cpp_extension.library_paths()
    torch_libraries = [f"-L{path}" for path in libdirs] + [f"-Wl,-rpath,{path}" for path in libdirs]
    torch_libraries += ["-ltorch_cpu", "-lc10", "-ltorch"]
    link = subprocess.run(
        ["c++", "-fsanitize=thread", *objects, "-o", str(binary), *torch_libraries],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert link.returncode == 0, link.stdout + link.stderr
    return binary


@pytest.mark.parametrize("bodies_only_start", [False, True], ids=["queues", "caller_driven"])
def test_queue_and_work_under_thread_sanitizer(
    rendered: Path, tmp_path: Path, bodies_only_start: bool
) -> None:
    gcc_runtime("libtsan.so")
    csrc = caller_driven(rendered / "csrc", tmp_path) if bodies_only_start else rendered / "csrc"
    binary = compile_tsan_runtime(csrc, tmp_path)
    suppressions = HERE / "sanitizers" / "tsan.supp"
    env = {**os.environ, "TSAN_OPTIONS": f"suppressions={suppressions}"}
    # Several runs, a few seconds each: races show in some interleavings only
    # (a deadlock between receives once showed in 1 run of about 45).
    for run in range(TSAN_RUNS):
        done = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=600)
        output = f"run {run + 1} of {TSAN_RUNS}:\n" + done.stdout + done.stderr
        assert "WARNING: ThreadSanitizer" not in output, output
        assert done.returncode == 0, output  # 66 (TSan's exit code) after a report
        assert f"cases: {TSAN_CASES}" in output and output.count("passed:") == TSAN_CASES, output
        assert ("(kBodiesOnlyStart)" in output) == bodies_only_start, output
