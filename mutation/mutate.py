"""Mutation testing of the test suites new-backend generates.

A generated project's ``tests/`` is only worth the wrong implementations it
catches. This harness proves that it catches the plausible ones: for each
mutant in ``mutants.toml`` (a bug written as a find/replace patch on a
rendered project's C++), it patches a rendered and built all-ops project,
rebuilds it incrementally (only the patched file recompiles), runs the tests
of the affected op (or the benchmark module's correctness check) and requires
them to fail. A mutant whose tests pass *survived*: the generated suite misses
that bug, and the fix is a new test in the template, not an exception here.

    python mutation/mutate.py                      # every mutant: store, mpi and ucx
    python mutation/mutate.py --impl store         # one implementation
    python mutation/mutate.py --only broadcast-root-ignored --one-by-one
    python mutation/mutate.py --baseline           # first: the tests pass unmutated
    python mutation/mutate.py --list

The projects are rendered and built once per implementation (in ``--workdir``,
a temporary folder by default). Mutants whose changes cannot reach each
other's tests (see footprint()) are applied together, rebuilt once and tested
in one pytest run (mutation_plugin.py records each one's first failing test);
the others one by one, with ``-x``. The exit status is 0 when every mutant was
killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
#: The catalogue of mutants.
MUTANTS = HERE / "mutants.toml"
#: The implementations the catalogue covers.
IMPLS = ("store", "mpi", "ucx")
#: The per-op tests of a generated suite (file::function); ids end in ``-OP]``.
OP_TESTS = (
    "test_ops.py::test_op",
    "test_ops.py::test_op_with_the_middle_and_last_rank_as_root",
    "test_ops.py::test_op_async",
    "test_ops.py::test_op_on_noncontiguous_tensors",
    "test_ops.py::test_op_in_the_shapes_real_clients_use",
    "test_ops.py::test_op_in_subgroups",
    "test_matrix.py::test_dtypes_and_reduce_ops_like_gloo",
)
#: World sizes the mutants are tested at (the suite itself also runs 4).
WORLD_SIZES = (2, 3)
#: A mutant whose tests run longer than this counts as killed (the suite hangs).
TEST_TIMEOUT = 300


@dataclass(frozen=True)
class Patch:
    """Replace ``find`` (exactly once) with ``replace`` in ``file``, within ``scope``.

    ``scope`` names a function of that file: the patch applies inside its
    definition only (from the line that defines it to its closing brace), so
    ``find`` needs to be unique there only. Empty: the whole file.
    """

    file: str
    find: str
    replace: str
    scope: str = ""


@dataclass(frozen=True)
class Mutant:
    """A plausible bug in a generated op body, and which tests must catch it."""

    name: str
    impl: str
    op: str
    description: str
    patches: tuple[Patch, ...]
    #: Test functions (``file::function``) to run instead of OP_TESTS.
    tests: tuple[str, ...] = ()
    #: Run the benchmark module with these arguments instead of tests: it must
    #: report wrong results.
    bench: tuple[str, ...] = ()
    #: Never tested in a batch with other mutants.
    alone: bool = False

    @property
    def id(self) -> str:
        return f"{self.impl}:{self.name}"


@dataclass
class Outcome:
    """What happened to one mutant: killed, survived, or (``error``) it could not be tried."""

    mutant: str
    killed: bool
    seconds: float
    detail: str = ""
    error: bool = False

    @property
    def verdict(self) -> str:
        return "ERROR" if self.error else "KILLED" if self.killed else "SURVIVED"

    def line(self) -> str:
        return f"{self.verdict:8} {self.mutant:55} {self.seconds:6.1f} s  {self.detail}"


@dataclass
class Report:
    """Every mutant's outcome, with the time the builds and the runs took."""

    outcomes: list[Outcome] = field(default_factory=list)
    build_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def killed(self) -> int:
        return sum(o.killed for o in self.outcomes)

    @property
    def survived(self) -> list[str]:
        return [o.mutant for o in self.outcomes if not o.killed and not o.error]

    @property
    def errors(self) -> list[str]:
        return [o.mutant for o in self.outcomes if o.error]

    def summary(self) -> str:
        lines = [o.line() for o in self.outcomes]
        builds = ", ".join(f"{impl} {s:.0f} s" for impl, s in self.build_seconds.items())
        lines.append(
            f"mutants: {len(self.outcomes)}, killed: {self.killed}, survived: {len(self.survived)}"
            f", errors: {len(self.errors)} (builds: {builds}; total {self.seconds:.0f} s)"
        )
        return "\n".join(lines)


class MutationError(RuntimeError):
    """The harness could not apply, build or test a mutant (not a survivor: a broken mutant)."""


def load_mutants(path: Path = MUTANTS) -> list[Mutant]:
    """The catalogue: one Mutant per [[mutant]] table and implementation it lists."""
    data = tomllib.loads(path.read_text())
    mutants = []
    names = set()
    for entry in data["mutant"]:
        impls = entry["impl"] if isinstance(entry["impl"], list) else [entry["impl"]]
        for impl in impls:
            if impl not in IMPLS:
                raise ValueError(f"mutant {entry['name']}: unknown impl {impl!r}")
            raw = entry.get("patch", [])
            raw = raw if isinstance(raw, list) else [raw]
            raw = [p for p in raw if p.get("impl", impl) == impl]
            if not raw:
                raise ValueError(f"mutant {entry['name']}: no patch for {impl}")
            patches = tuple(
                Patch(p.get("file", "csrc/ops.cpp"), p["find"], p["replace"], p.get("scope", ""))
                for p in raw
            )
            mutant = Mutant(
                name=entry["name"],
                impl=impl,
                op=entry["op"],
                description=" ".join(entry["description"].split()),
                patches=patches,
                tests=tuple(entry.get("tests", ())),
                bench=tuple(entry.get("bench", ())),
                alone=bool(entry.get("alone", False)),
            )
            if mutant.id in names:
                raise ValueError(f"mutant {mutant.id} is listed twice")
            names.add(mutant.id)
            mutants.append(mutant)
    return mutants


def _scope_span(text: str, scope: str) -> tuple[int, int]:
    """Where the definition of function ``scope`` lies in C++ ``text``: [start, end)."""
    definition = rf"^\S[^\n;]*\b{re.escape(scope)}\([^;]*?\{{\n"
    match = re.search(definition, text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise MutationError(f"no definition of {scope}() found")
    end = text.find("\n}\n", match.end())
    if end < 0:
        raise MutationError(f"no end of {scope}() found")
    return match.start(), end + 3


def apply_patch(text: str, patch: Patch) -> str:
    """``text`` with ``patch`` applied; MutationError unless ``find`` occurs once in its scope."""
    start, end = _scope_span(text, patch.scope) if patch.scope else (0, len(text))
    region = text[start:end]
    count = region.count(patch.find)
    if count != 1:
        where = f"{patch.scope}() in {patch.file}" if patch.scope else patch.file
        raise MutationError(f"{patch.find!r} occurs {count} times in {where}, not once")
    return text[:start] + region.replace(patch.find, patch.replace) + text[end:]


@contextlib.contextmanager
def mutated(project: Path, *mutants: Mutant) -> Iterator[None]:
    """Within the block ``project`` carries the patches of ``mutants``; restored afterwards."""
    originals: dict[Path, str] = {}
    try:
        for patch in [patch for mutant in mutants for patch in mutant.patches]:
            path = project / patch.file
            text = path.read_text()
            originals.setdefault(path, text)
            path.write_text(apply_patch(text, patch))
        yield
    finally:
        for path, text in originals.items():
            path.write_text(text)


def project_name(impl: str) -> str:
    return f"mut_{impl}"


def render(impl: str, output_dir: Path) -> Path:
    """An all-ops project with implementation ``impl``, rendered into ``output_dir``."""
    from new_backend import generate_project

    return generate_project(
        project_name(impl), ops="all", impl=impl, devices="cpu", output_dir=output_dir
    ).target


def build(project: Path, jobs: int = 2) -> float:
    """Builds ``project`` in place with ninja (again: only what changed); the seconds it took."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=project,
        env={**os.environ, "MAX_JOBS": str(jobs)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        lines = done.stdout.splitlines() + done.stderr.splitlines()
        errors = [line for line in lines if "error" in line]
        raise MutationError(f"build of {project.name} failed:\n" + "\n".join(errors[:20]))
    return time.monotonic() - start


def _env(project: Path) -> dict[str, str]:
    macro = project.name.upper()
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(project / "src"), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        # A mutant may make ranks wait for each other forever: fail fast.
        f"{macro}_TEST_CASE_TIMEOUT": "40",
        f"{macro}_TEST_GROUP_TIMEOUT": "20",
    }


def collect(project: Path) -> list[str]:
    """Every test id of the project's suite (``tests/file.py::function[params]``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line for line in done.stdout.splitlines() if line.startswith("tests/")]
    if done.returncode != 0 or not ids:
        output = done.stdout + done.stderr
        raise MutationError(f"collecting the tests of {project.name} failed:\n{output}")
    return ids


def select(
    ids: Sequence[str], mutant: Mutant, world_sizes: Sequence[int] = WORLD_SIZES
) -> list[str]:
    """The ids of the tests that must catch ``mutant``, in its tests' order.

    A parametrised test is taken at ``world_sizes`` only, and, where it is
    parametrised by op, for the mutant's op only.
    """
    wanted = mutant.tests or OP_TESTS
    chosen = []
    for function in wanted:
        for test_id in ids:
            base, _, params = test_id.partition("[")
            if base != f"tests/{function}":
                continue
            parts = params.rstrip("]").split("-") if params else []
            worlds = [p for p in parts if re.fullmatch(r"world\d+", p)]
            if worlds and int(worlds[0][5:]) not in world_sizes:
                continue
            others = [p for p in parts if p not in worlds]
            if others and function in OP_TESTS and others != [mutant.op]:
                continue
            chosen.append(test_id)
    if not chosen:
        raise MutationError(f"{mutant.id}: no test selected from {wanted}")
    return chosen


def _pytest(
    project: Path, mutant_of: dict[str, str], stop_at_first: bool, timeout: float
) -> tuple[dict[str, str], str | None]:
    """Runs the tests in ``mutant_of`` (test id -> mutant) through mutation_plugin.

    Returns the first failing test of each mutant that had one, and why the
    run went wrong otherwise (None when pytest ran to its end).
    """
    with tempfile.TemporaryDirectory() as scratch:
        killed_file = Path(scratch) / "killed.json"
        env = _env(project)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
        env["NEW_BACKEND_MUTANT_OF"] = json.dumps(mutant_of)
        env["NEW_BACKEND_MUTANTS_KILLED"] = str(killed_file)
        command = [
            sys.executable, "-m", "pytest", *mutant_of, "-q", "-p", "no:cacheprovider",
            "-p", "mutation_plugin", *(["-x"] if stop_at_first else []),
        ]  # fmt: skip
        problem = None
        try:
            done = subprocess.run(
                command, cwd=project, env=env, capture_output=True, text=True, timeout=timeout
            )
            if done.returncode not in (0, 1):
                output = done.stdout + done.stderr
                problem = f"pytest exited with {done.returncode}:\n{output[-3000:]}"
        except subprocess.TimeoutExpired:
            problem = f"the tests ran for over {timeout:.0f} s"
        killed = json.loads(killed_file.read_text()) if killed_file.exists() else {}
    return killed, problem


def run_bench(project: Path, args: Sequence[str]) -> tuple[bool, str]:
    """Runs the project's benchmark module: killed when it reports wrong results."""
    package = f"{project.name}_collectives"
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable, "-m", f"{package}.bench", "-b", "64", "-e", "64", "-n", "1", "-w", "0",
            "--reference", "none", "--out", str(Path(scratch) / "bench"), *args,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, cwd=project, env=_env(project), capture_output=True, text=True,
                timeout=TEST_TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return True, f"the benchmark hung for {TEST_TIMEOUT} s"
    output = done.stdout + done.stderr
    match = re.search(r"# Out of bounds values : (\d+) (OK|FAILED)", output)
    if match is None:
        raise MutationError(f"the benchmark printed no correctness line:\n{output[-3000:]}")
    wrong = int(match.group(1))
    return wrong > 0, f"bench: {wrong} wrong values"


#: Ops whose tests also call another op (send/recv tests need both ends).
COMPANIONS = {"send": {"recv"}, "recv": {"send"}, "recvAnysource": {"send"}}


def exercised(mutant: Mutant) -> set[str]:
    """The ops the tests of ``mutant`` call."""
    return {mutant.op} | COMPANIONS.get(mutant.op, set())


def footprint(text: str, mutant: Mutant, ops: set[str]) -> set[str] | None:
    """The ops whose behaviour ``mutant`` may change (None: any op).

    A patch in an op's function changes that op; a patch in a helper changes
    every op whose function calls it, directly or through other helpers; a
    patch that only adds text at file level changes nothing by itself.
    """
    bodies = {}
    for name in re.findall(r"^\S[^\n;(]*?\b(\w+)\([^;]*?\{\n", text, re.MULTILINE | re.DOTALL):
        with contextlib.suppress(MutationError):
            start, end = _scope_span(text, name)
            bodies[name] = text[start:end]
    changed: set[str] = set()
    for patch in mutant.patches:
        if patch.file != "csrc/ops.cpp":
            return None
        if not patch.scope:
            if patch.find not in patch.replace:
                return None  # rewrites shared code at file level
            continue
        reach, grew = {patch.scope}, True
        while grew:  # the functions that call a function in reach
            callers = {
                name for name, body in bodies.items()
                if name not in reach and any(re.search(rf"(?<![\w.>]){f}\(", body) for f in reach)
            }  # fmt: skip
            reach |= callers
            grew = bool(callers)
        changed |= reach & ops
    return changed


def batches(mutants: Sequence[Mutant], text: str, ops: set[str]) -> list[list[Mutant]]:
    """Groups ``mutants`` so that no mutant of a group changes an op another one's tests call."""
    groups: list[list[Mutant]] = []
    footprints: dict[str, set[str]] = {}
    changed = {m.id: footprint(text, m, ops) for m in mutants}
    # The mutants that change most ops first: each starts a group the others fill.
    ordered = sorted(mutants, key=lambda m: -len(ops if changed[m.id] is None else changed[m.id]))
    for mutant in ordered:
        changes = changed[mutant.id]
        if mutant.alone or mutant.bench or changes is None:
            groups.append([mutant])
            continue
        footprints[mutant.id] = changes
        for group in groups:
            if len(group) > 1 or (group[0].id in footprints):
                clash = any(
                    footprints[m.id] & exercised(mutant)
                    or changes & exercised(m)
                    or exercised(m) & exercised(mutant)
                    for m in group
                )
                if not clash:
                    group.append(mutant)
                    break
        else:
            groups.append([mutant])
    return groups


def run_batch(
    project: Path, batch: Sequence[Mutant], ids: Sequence[str], world_sizes: Sequence[int]
) -> list[Outcome]:
    """Applies the mutants of ``batch`` together, rebuilds once, tests each; reverts."""
    start = time.monotonic()
    try:
        with mutated(project, *batch):
            build(project)
            if len(batch) == 1 and batch[0].bench:
                killed, detail = run_bench(project, batch[0].bench)
                return [Outcome(batch[0].id, killed, time.monotonic() - start, detail)]
            mutant_of = {
                test_id: mutant.id
                for mutant in batch
                for test_id in select(ids, mutant, world_sizes)
            }
            killed_by, problem = _pytest(
                project, mutant_of, stop_at_first=len(batch) == 1, timeout=TEST_TIMEOUT * len(batch)
            )
    except MutationError as e:
        seconds = time.monotonic() - start
        return [Outcome(m.id, False, seconds, str(e)[:2000], error=True) for m in batch]
    seconds = (time.monotonic() - start) / len(batch)
    outcomes = []
    for mutant in batch:
        if mutant.id in killed_by:
            outcomes.append(
                Outcome(mutant.id, True, seconds, killed_by[mutant.id].removeprefix("tests/"))
            )
        elif problem is not None:
            outcomes.append(Outcome(mutant.id, False, seconds, problem, error=True))
        else:
            outcomes.append(Outcome(mutant.id, False, seconds, "every selected test passed"))
    return outcomes


def check_baseline(
    project: Path, mutants: Sequence[Mutant], ids: Sequence[str], world_sizes: Sequence[int]
) -> None:
    """Every test selected for ``mutants`` passes on the project as generated."""
    selected = {t: "baseline" for m in mutants if not m.bench for t in select(ids, m, world_sizes)}
    failed, problem = _pytest(project, selected, stop_at_first=True, timeout=3600)
    if failed or problem:
        raise MutationError(f"without a mutant, {failed or problem}")


def prepare(impl: str, workdir: Path, project: Path | None = None) -> tuple[Path, float]:
    """Renders and builds the all-ops ``impl`` project under ``workdir`` (reused when there).

    ``project``: an all-ops ``impl`` project built already (by pip, in its own
    folder): only what is out of date is rebuilt.
    """
    if project is None:
        project = workdir / project_name(impl)
        if not project.exists():
            render(impl, workdir)
    return project, build(project)


def run(
    mutants: Sequence[Mutant],
    workdir: Path,
    world_sizes: Sequence[int] = WORLD_SIZES,
    log=print,
    batch: bool = True,
    baseline: bool = False,
    projects: dict[str, Path] | None = None,
) -> Report:
    """Runs every mutant (by implementation, in batches unless ``batch`` is false); the report.

    With ``baseline``, first runs every selected test on the project as
    generated: they must all pass, or a "killed" would prove nothing. (The
    generator's CI runs these suites in full in tests/test_build.py.)
    ``projects``: built all-ops projects to mutate, by implementation (see
    ``prepare``); the others are rendered and built in ``workdir``.
    """
    from new_backend.catalogue import load_catalogue

    ops = {op.name for op in load_catalogue().ops}
    report = Report()
    start = time.monotonic()
    for impl in IMPLS:
        chosen = [m for m in mutants if m.impl == impl]
        if not chosen:
            continue
        project, seconds = prepare(impl, workdir, (projects or {}).get(impl))
        report.build_seconds[impl] = seconds
        ids = collect(project)
        text = (project / "csrc" / "ops.cpp").read_text()
        groups = batches(chosen, text, ops) if batch else [[m] for m in chosen]
        if baseline:
            check_baseline(project, chosen, ids, world_sizes)
            log(f"{impl}: every selected test passes without a mutant")
        log(
            f"{impl}: built {project} in {seconds:.0f} s; {len(chosen)} mutants, {len(groups)} runs"
        )
        for group in groups:
            for outcome in run_batch(project, group, ids, world_sizes):
                report.outcomes.append(outcome)
                log(outcome.line())
        build(project)  # leave the project as generated
    report.seconds = time.monotonic() - start
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: runs the catalogue, prints the report; 0 if every mutant was killed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default=",".join(IMPLS), help="comma-separated: store, mpi, ucx")
    parser.add_argument("--only", action="append", default=[], help="a mutant's name (repeatable)")
    parser.add_argument("--world-sizes", default=",".join(map(str, WORLD_SIZES)))
    parser.add_argument("--workdir", type=Path, help="where to render and build (kept; reused)")
    parser.add_argument("--json", type=Path, help="write the report here too")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--baseline", action="store_true", help="first check the selected tests pass unmutated"
    )
    parser.add_argument(
        "--one-by-one", action="store_true", help="one build and test run per mutant (no batches)"
    )
    args = parser.parse_args(argv)
    impls = args.impl.split(",")
    mutants = [
        m for m in load_mutants() if m.impl in impls and (not args.only or m.name in args.only)
    ]
    if args.list:
        for m in mutants:
            print(f"{m.id:55} {m.description}")
        return 0
    if not mutants:
        parser.error("no mutant selected")
    world_sizes = [int(w) for w in args.world_sizes.split(",")]
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = run(
            mutants, args.workdir, world_sizes, batch=not args.one_by_one, baseline=args.baseline
        )
    else:
        workdir = Path(tempfile.mkdtemp(prefix="new-backend-mutation-"))
        try:
            report = run(
                mutants, workdir, world_sizes, batch=not args.one_by_one, baseline=args.baseline
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print(report.summary())
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return 0 if report.killed == len(report.outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
