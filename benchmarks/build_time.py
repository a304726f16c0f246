"""Build times: the generated dummy against the tutorial's one-file build.

Clean builds alternate between the two projects, round after round, so both
see the same machine; medians and the ratio are printed. Then the incremental
rebuild after touching one op's source (csrc/ops.cpp), against rebuilding the
tutorial after touching its one source file.

    python benchmarks/build_time.py [--rounds 3]

Builds use `python setup.py build_ext --inplace` in scratch copies, so what is
timed is the compiler and linker, not pip.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECTS = {
    "generated dummy": REPO / "examples" / "dummy",
    "tutorial dummy": REPO / "benchmarks" / "tutorial_dummy",
}
TOUCH = {"generated dummy": "csrc/ops.cpp", "tutorial dummy": "src/dummy.cpp"}


def build(project: Path) -> float:
    """Seconds for one `setup.py build_ext --inplace` in ``project``."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"building {project} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return elapsed


def fresh_copy(source: Path, scratch: Path) -> Path:
    target = scratch / source.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("build", "*.so", "*.egg-info"))
    return target


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    clean: dict[str, list[float]] = {name: [] for name in PROJECTS}
    incremental: dict[str, list[float]] = {name: [] for name in PROJECTS}
    with tempfile.TemporaryDirectory(prefix="build-time-") as scratch:
        for round_ in range(args.rounds):
            order = list(PROJECTS) if round_ % 2 == 0 else list(reversed(PROJECTS))
            for name in order:
                project = fresh_copy(PROJECTS[name], Path(scratch))
                clean[name].append(build(project))
                (project / TOUCH[name]).touch()
                incremental[name].append(build(project))
                print(
                    f"round {round_ + 1} {name}: clean {clean[name][-1]:.1f} s, "
                    f"after touching {TOUCH[name]} {incremental[name][-1]:.1f} s",
                    flush=True,
                )

    results = {
        "clean": {name: summary(v) for name, v in clean.items()},
        "incremental": {name: summary(v) for name, v in incremental.items()},
    }
    ours, tutorial = "generated dummy", "tutorial dummy"
    for kind in ("clean", "incremental"):
        print(f"\n{kind} build (s)      min   median   max")
        for name in PROJECTS:
            s = results[kind][name]
            print(f"  {name:<16} {s['min']:6.1f} {s['median']:7.1f} {s['max']:6.1f}")
        ratio = results[kind][ours]["median"] / results[kind][tutorial]["median"]
        results[kind]["ratio"] = ratio
        print(f"  generated / tutorial (medians): {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
