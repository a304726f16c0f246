"""all_reduce bus bandwidth and latency of generated backends against gloo.

Runs each backend's own benchmark module (`python -m NAME_collectives.bench`,
nccl-tests conventions, gloo measured in the same processes, size by size)
several times per world size. With several packages, each round runs them one
after the other, so that load on a shared machine hits them alike. Prints, per
world size and size, each backend's min/median/max busbw and time, the gloo
figures of its own runs, and the median of its per-run busbw ratios to gloo.

    python benchmarks/busbw.py --package store_collectives --world-sizes 2,4 \
        --sizes 4,1M,16M --rounds 3
    python benchmarks/busbw.py --package ucx_all_collectives --package store_all_collectives \
        --package mpi_all_collectives:mpirun --world-sizes 2 --sizes 4,16M

`--hogs N` keeps N busy-looping processes running throughout, as other
programs on a shared machine would (the machine's load average then exceeds
its cores): it shows how waits behave when a rank competes for its core.

`PACKAGE:mpirun` launches that package's benchmark under mpirun (needed for
`--impl mpi`); `--launcher mpirun` makes it the default. A size of 4 bytes (one
float) reports latency: the time column matters there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_bench(package: str, world: int, size: str, launcher: str, out: Path, iters: int) -> dict:
    """One run of ``package``'s bench module at one size; its JSON results."""
    bench = ["-m", f"{package}.bench", "--collectives", "all_reduce", "-b", size, "-e", size,
             "-n", str(iters), "-w", "3", "--out", str(out), "--no-progress"]  # fmt: skip
    if launcher == "mpirun":
        command = ["mpirun", "-n", str(world), sys.executable, *bench]
    else:
        command = [sys.executable, *bench, "--nprocs", str(world)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(out.with_suffix(".json").read_text())


@contextlib.contextmanager
def hogs(count: int):
    """``count`` processes that each keep a core busy until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def summarise(world: int, size: int, samples: dict[str, list[dict]]) -> dict:
    """One row: the backend's and gloo's in-place samples, and their per-run ratios."""
    backend, reference = list(samples)
    row: dict = {"world_size": world, "bytes": size}
    for name, key in ((backend, "backend"), (reference, "reference")):
        busbw = [s["busbw"] for s in samples[name]]
        time_us = [s["time_us"] for s in samples[name]]
        row[key] = {"name": name, "busbw": sorted(busbw), "time_us": sorted(time_us)}
    pairs = list(zip(samples[backend], samples[reference], strict=True))
    row["busbw_ratio"] = statistics.median(b["busbw"] / r["busbw"] for b, r in pairs)
    row["time_ratio"] = statistics.median(b["time_us"] / r["time_us"] for b, r in pairs)
    return row


def spread(values: list[float], digits: int) -> str:
    """min/median/max."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:.{digits}f}/{mid:.{digits}f}/{high:.{digits}f}"


def print_table(rows: list[dict]) -> None:
    """The rows of one world size and size, as a markdown table."""
    print(f"\nranks {rows[0]['world_size']}, {rows[0]['bytes']} B, in place "
          "(min/median/max of runs; gloo measured in each backend's own runs)")  # fmt: skip
    print("| backend | busbw GB/s | time us | gloo busbw GB/s | gloo time us "
          "| busbw / gloo | time / gloo |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        b, r = row["backend"], row["reference"]
        print(
            f"| {b['name']} | {spread(b['busbw'], 3)} | {spread(b['time_us'], 1)} | "
            f"{spread(r['busbw'], 3)} | {spread(r['time_us'], 1)} | "
            f"{row['busbw_ratio']:.2f} | {row['time_ratio']:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--package",
        action="append",
        required=True,
        help="store_collectives, or mpi_collectives:mpirun; repeat it to compare",
    )
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--sizes", default="4,1M,16M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--launcher", choices=["spawn", "mpirun"], default="spawn")
    parser.add_argument("--hogs", type=int, default=0, help="busy loops beside the runs")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    packages = [(*p.split(":", 1),) if ":" in p else (p, args.launcher) for p in args.package]
    for _, launcher in packages:
        if launcher not in ("spawn", "mpirun"):
            parser.error(f"unknown launcher {launcher!r} (spawn, mpirun)")

    results = []
    print(f"# load average before: {os.getloadavg()[0]:.1f}; hogs: {args.hogs}", flush=True)
    with tempfile.TemporaryDirectory(prefix="busbw-") as scratch, hogs(args.hogs):
        for world in [int(w) for w in args.world_sizes.split(",")]:
            for size in args.sizes.split(","):
                samples: dict[str, dict[str, list[dict]]] = {p: {} for p, _ in packages}
                for round_ in range(args.rounds):
                    for package, launcher in packages:
                        out = Path(scratch, f"{package}-w{world}-{size}-{round_}")
                        data = run_bench(package, world, size, launcher, out, args.iters)
                        for backend, places in data["rows"][0]["results"].items():
                            samples[package].setdefault(backend, []).append(places["in-place"])
                nbytes = data["rows"][0]["size"]
                rows = [summarise(world, nbytes, samples[p]) for p, _ in packages]
                print_table(rows)
                results.extend(rows)
    print(f"\n# load average after: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
