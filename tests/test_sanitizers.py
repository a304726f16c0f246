"""The generated store runtime under sanitizers (issue 9, "Sanitizers in CI").

AddressSanitizer and UndefinedBehaviorSanitizer: a store project with every
op, built with ``CFLAGS``/``LDFLAGS`` ``-fsanitize=address,undefined`` (the
generated README's build section says how), runs its own runtime and failure
tests with the sanitizer runtimes preloaded into Python and so into every rank
the harness spawns. No report may touch the project's own code: a report
naming a ``csrc/`` file or the project's extension fails the test.

ThreadSanitizer cannot run the Python tests: the extension would have to be
built with ``-fsanitize=thread`` and libtsan preloaded into an uninstrumented
Python and torch, whose synchronisation it cannot see (see ``TSAN_SUPPRESSIONS``).
So ``sanitizers/tsan_runtime.cpp`` drives the runtime (queue, Work, teardown)
from C++ threads instead: several ranks in one process over a HashStore.

Needs gcc's sanitizer runtimes (libasan, libubsan, libtsan: Debian's gcc has
them). Marked ``build``: about 4 minutes on two cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from new_backend import generate_project
from test_build import Built, build

pytestmark = [pytest.mark.build, pytest.mark.timeout(1800)]

HERE = Path(__file__).resolve().parent
NAME = "san_store"  # tsan_runtime.cpp uses san_store_collectives::BackendSanStore
PACKAGE = f"{NAME}_collectives"

SANITIZE = "-fsanitize=address,undefined -fno-omit-frame-pointer"

#: The generated tests run under ASan and UBSan: every test of test_failures.py
#: and test_runtime.py, but torchrun (a launcher, no runtime code of its own
#: beyond what the rendezvous tests cover) and the env/file rendezvous (tcp and
#: store= cover the runtime's side of rendezvous).
DESELECT = [
    "tests/test_runtime.py::test_under_torchrun",
    "tests/test_runtime.py::test_rendezvous_methods[env]",
    "tests/test_runtime.py::test_rendezvous_methods[file]",
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
        found += [f"{log.name}:\n{part}" for part in parts if part.strip()]
    return found


def touches_project(report: str) -> bool:
    return "/csrc/" in report or f"{PACKAGE}/_C" in report


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render-san")
    return generate_project(NAME, ops="all", impl="store", output_dir=out).target


@pytest.fixture(scope="session")
def asan_built(rendered: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    gcc_runtime("libasan.so")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CFLAGS", SANITIZE)
        patch.setenv("LDFLAGS", "-fsanitize=address,undefined")
        return build(rendered, tmp_path_factory.mktemp("build-asan"))


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
    deselect = [arg for test in DESELECT for arg in ("--deselect", test)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_runtime.py", "tests/test_failures.py",
         *deselect, "-q", "-p", "no:cacheprovider"],
        cwd=project, env=sanitized_env(logs, asan_built.site),
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    found = reports(logs)
    ours = [report for report in found if touches_project(report)]
    assert not ours, f"{len(ours)} sanitizer reports in the project's code:\n\n" + "\n\n".join(ours)
    assert done.returncode == 0, done.stdout + done.stderr + "\n\n".join(found)
