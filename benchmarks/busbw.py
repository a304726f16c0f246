"""all_reduce bus bandwidth and latency of generated backends against gloo.

Runs each backend's own benchmark module (`python -m NAME_collectives.bench`,
nccl-tests conventions, gloo measured in the same processes, size by size)
several times per world size, and prints min/median/max busbw and the median
ratio to gloo for each size.

    python benchmarks/busbw.py --package store_collectives --world-sizes 2,4 \
        --sizes 4,1M,16M --rounds 3
    python benchmarks/busbw.py --package mpi_collectives --launcher mpirun \
        --world-sizes 2,4 --sizes 1M,16M,64M

A size of 4 bytes (one float) reports latency: the time column matters there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_bench(package: str, world: int, size: str, launcher: str, out: Path, iters: int) -> dict:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", required=True, help="e.g. store_collectives")
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--sizes", default="4,1M,16M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--launcher", choices=["spawn", "mpirun"], default="spawn")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory(prefix="busbw-") as scratch:
        for world in [int(w) for w in args.world_sizes.split(",")]:
            for size in args.sizes.split(","):
                samples: dict[str, list[dict]] = {}
                for round_ in range(args.rounds):
                    out = Path(scratch, f"w{world}-{size}-{round_}")
                    data = run_bench(args.package, world, size, args.launcher, out, args.iters)
                    for backend, places in data["rows"][0]["results"].items():
                        samples.setdefault(backend, []).append(places["in-place"])
                backend, reference = list(samples)
                row = {"world_size": world, "bytes": data["rows"][0]["size"]}
                for name, key in ((backend, "backend"), (reference, "reference")):
                    busbw = [s["busbw"] for s in samples[name]]
                    time_us = [s["time_us"] for s in samples[name]]
                    row[key] = {"name": name, "busbw": sorted(busbw), "time_us": sorted(time_us)}
                row["busbw_ratio"] = statistics.median(
                    b["busbw"] / r["busbw"]
                    for b, r in zip(samples[backend], samples[reference], strict=True)
                )
                row["time_ratio"] = statistics.median(
                    b["time_us"] / r["time_us"]
                    for b, r in zip(samples[backend], samples[reference], strict=True)
                )
                results.append(row)
                print_row(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def print_row(row: dict) -> None:
    b, r = row["backend"], row["reference"]

    def spread(values: list[float], digits: int) -> str:
        low, mid, high = min(values), statistics.median(values), max(values)
        return f"{low:.{digits}f}/{mid:.{digits}f}/{high:.{digits}f}"

    print(
        f"ranks {row['world_size']} size {row['bytes']:>9} B | "
        f"{b['name']}: busbw {spread(b['busbw'], 3)} GB/s, time {spread(b['time_us'], 1)} us | "
        f"{r['name']}: busbw {spread(r['busbw'], 3)} GB/s, time {spread(r['time_us'], 1)} us | "
        f"busbw ratio {row['busbw_ratio']:.2f}, time ratio {row['time_ratio']:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
