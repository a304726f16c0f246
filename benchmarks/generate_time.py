"""Time to generate the default project: `new-backend` against plain `cookiecutter`.

Both render the same template into a scratch folder, alternated, as
subprocesses (so Python start-up is counted for both); medians and the ratio
are printed.

    python benchmarks/generate_time.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    commands = {
        "new-backend": [str(BIN / "new-backend")],
        "cookiecutter": [str(BIN / "cookiecutter"), "--no-input", str(REPO / "template")],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory(prefix="generate-time-") as scratch:
        env = dict(os.environ, HOME=scratch)  # cookiecutter writes its replay file to HOME
        for round_ in range(args.rounds):
            for name in commands if round_ % 2 == 0 else reversed(commands):
                out = Path(scratch, "out")
                out.mkdir()
                times[name].append(timed(commands[name], out, env))
                shutil.rmtree(out)
    print("render the default project (s)   min  median   max")
    for name, values in times.items():
        print(
            f"  {name:<14} {min(values):6.2f} {statistics.median(values):7.2f} {max(values):6.2f}"
        )
    ratio = statistics.median(times["new-backend"]) / statistics.median(times["cookiecutter"])
    print(f"  new-backend / cookiecutter (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
