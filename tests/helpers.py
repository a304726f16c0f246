"""Shared helpers of the generator's tests and of update_golden.py (no pytest needed here)."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner, Result
from new_backend.cli import cli

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template"
EXAMPLE_DUMMY = REPO / "examples" / "dummy"
GOLDEN = REPO / "tests" / "golden"
UPDATE_COMMAND = "python tests/update_golden.py"

#: Golden cases: tests/golden/<case>/ holds what `new-backend <args>` renders.
#: The first argument is the backend name, so the project folder is args[0].
GOLDEN_CASES: dict[str, tuple[str, ...]] = {
    "allops": ("allops", "--ops", "all"),
    "single": ("single", "--ops", "allreduce", "--devices", "cuda"),
    # The reference implementation over the c10d Store, every op.
    "store_all": ("store_all", "--impl", "store", "--ops", "all"),
    # Every op over MPI.
    "mpi_all": ("mpi_all", "--impl", "mpi", "--ops", "all"),
    # Every op as ring, tree and pairwise algorithms over UCX's tagged messages.
    "ucx_all": ("ucx_all", "--impl", "ucx", "--ops", "all"),
    # A name with underscores and a digit (C++ class MyRdma2) and ops given by alias.
    "my_rdma2": (
        "my_rdma2",
        "--ops",
        "all_to_all_single,reduce_scatter_tensor,isend,irecv,recv_any_source,barrier",
        "--devices",
        "cpu",
    ),
}


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """Run the block with ``path`` as the current directory."""
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run_cli(args: Sequence[str], cwd: Path | None = None) -> Result:
    """Invoke ``new-backend ARGS`` in-process (in ``cwd`` when given) and return click's result."""
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(cli, list(args), prog_name="new-backend")
    with working_directory(cwd):
        return runner.invoke(cli, list(args), prog_name="new-backend")


def render_with_cli(args: Sequence[str], out: Path) -> Path:
    """Render ``new-backend ARGS`` with ``out`` as the current directory; the project folder."""
    out.mkdir(parents=True, exist_ok=True)
    result = run_cli(args, cwd=out)
    if result.exit_code != 0:
        raise RuntimeError(f"new-backend {' '.join(args)} failed: {result.output}")
    name = args[0] if args else "dummy"
    return out / name


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (dotfiles included): relative POSIX path -> content."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def listing(root: Path) -> dict[str, bytes | None]:
    """Everything under ``root``, folders (None) and files (content), to compare before/after."""
    return {
        p.relative_to(root).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def tree_difference(expected: Path, actual: Path) -> str | None:
    """None if both trees have the same files with the same bytes, else what differs.

    The message names missing and extra files and shows a unified diff of the
    first file whose content differs.
    """
    want, got = tree(expected), tree(actual)
    problems = []
    if missing := sorted(want.keys() - got.keys()):
        problems.append(f"missing from the fresh render: {missing}")
    if extra := sorted(got.keys() - want.keys()):
        problems.append(f"new in the fresh render: {extra}")
    changed = [name for name in sorted(want.keys() & got.keys()) if want[name] != got[name]]
    if changed:
        first = changed[0]
        diff = difflib.unified_diff(
            want[first].decode("utf-8", "replace").splitlines(keepends=True),
            got[first].decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"{expected.name}/{first} (checked in)",
            tofile=f"{actual.name}/{first} (fresh render)",
        )
        problems.append(f"{len(changed)} file(s) differ: {changed}; the first:\n{''.join(diff)}")
    return "\n".join(problems) or None


def assert_one_line_error(result: Result, exit_code: int) -> str:
    """The command failed with ``exit_code``: one ``Error: ...`` line, no traceback; the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}"
    )
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {result.stderr!r}"
    assert lines[0].startswith("Error: "), lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == "", f"expected nothing on stdout, got {result.stdout!r}"
    assert result.exit_code == exit_code, f"exit {result.exit_code}, not {exit_code}: {lines[0]}"
    return lines[0]


@dataclass(frozen=True)
class Built:
    project: Path  # a copy of the project, where it was built
    site: Path  # where pip installed it

    @property
    def answers(self) -> dict:
        return json.loads((self.project / ".new-backend.json").read_text())


def build(source: Path, work: Path) -> Built:
    """Copy ``source`` to ``work`` (so no build/ lands in the repo) and pip-install it there."""
    project, site = work / source.name, work / "site"
    shutil.copytree(source, project)
    pip = [sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps"]
    done = subprocess.run(
        [*pip, "--target", str(site), str(project)], capture_output=True, text=True, timeout=1500
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"building {source.name} failed:\n{log}"
    # The project's own sources compile without a single warning.
    warnings = [line for line in log.splitlines() if "warning" in line and "/csrc/" in line]
    assert not warnings, "\n".join(warnings)
    return Built(project, site)


def ucx_by_pkg_config() -> bool:
    """Whether ``pkg-config ucx`` finds UCX (Debian's libucx-dev)."""
    return bool(shutil.which("pkg-config")) and (
        subprocess.run(["pkg-config", "--exists", "ucx"], check=False).returncode == 0
    )


def have_ucx() -> bool:
    """Whether a generated ucx project can find UCX: ``UCX_HOME``, or pkg-config."""
    return bool(os.environ.get("UCX_HOME")) or ucx_by_pkg_config()


def add_an_option(project: Path) -> None:
    """Add a field to Options and to describeOptions in csrc/ops.hpp, as its README invites."""
    ops_hpp = project / "csrc" / "ops.hpp"
    text = ops_hpp.read_text()
    field = "  bool verbose = false;\n"
    described = '  field("verbose", &Options::verbose, "report each group created on stderr");\n'
    assert field in text and described in text
    ops_hpp.write_text(
        text.replace(field, field + "  int64_t rails = 1;\n").replace(
            described, described + '  field("rails", &Options::rails, "network rails to use");\n'
        )
    )


#: What a user adds to ops.cpp and README.md (edit_ops_readme_and_options).
USER_HELPER = (
    "\n// mine: a helper of my library, kept across updates\nint myHelper() { return 7; }\n"
)
USER_NOTES = "Notes of mine, kept across updates.\n"


def edit_ops_readme_and_options(project: Path) -> None:
    """What a project's README invites: code in ops.cpp, an option (``rails``) in ops.hpp,
    notes in README.md."""
    ops = project / "csrc" / "ops.cpp"
    end = "} // namespace ops\n"
    ops.write_text(ops.read_text().replace(end, end + USER_HELPER))
    add_an_option(project)
    readme = project / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    readme.write_text("".join([lines[0], "\n", USER_NOTES, *lines[1:]]))
