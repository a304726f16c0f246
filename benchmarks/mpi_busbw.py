"""all_reduce bus bandwidth of a generated --impl mpi backend against gloo, in the same processes.

    python benchmarks/mpi_busbw.py --package mybackend_collectives [--world-sizes 2,4]

starts ``mpirun -n N`` of itself for each world size. Every rank creates the
MPI backend's default group (``init_process_group_from_mpi``) and a gloo group
over the same ranks, then times float32 ``all_reduce`` at 1, 16 and 64 MiB on
both, alternating the two backends round by round (which goes first flips each
round), so that load from elsewhere on the machine hits both alike. Each
sample is the slowest rank's mean time over a few calls.

Reported as nccl-tests does: algbw = bytes / time, busbw = algbw * 2(n-1)/n,
in GB/s; min / median / max over the rounds, and the ratio of the medians.
The machine's load average and busiest other processes are printed with the
results: on a shared machine they say how far to trust them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
#: Calls timed per sample, by message size: enough to last ~0.1 s or more.
CALLS = {1: 50, 16: 10, 64: 4}


def worker(args: argparse.Namespace) -> None:
    """One rank, started by mpirun: measure, and rank 0 writes the samples as JSON."""
    import torch
    import torch.distributed as dist

    package = importlib.import_module(args.package)
    package.init_process_group_from_mpi()
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {package.BACKEND_NAME: dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    gloo = groups["gloo"]

    def sample(group, tensor: torch.Tensor, calls: int) -> float:
        """Seconds per all_reduce: the slowest rank's mean over ``calls`` calls."""
        dist.all_reduce(tensor, group=group)  # warm-up
        dist.barrier(group=gloo)
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(tensor, group=group)
        elapsed = torch.tensor([(time.perf_counter() - start) / calls], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)
        return elapsed.item()

    samples: dict[str, dict[str, list[float]]] = {
        str(size): {name: [] for name in groups} for size in args.sizes
    }
    for round_ in range(args.rounds):
        for size in args.sizes:
            tensor = torch.ones(size * MIB // 4)
            order = list(groups) if round_ % 2 == 0 else list(reversed(groups))
            for name in order:
                samples[str(size)][name].append(sample(groups[name], tensor, CALLS.get(size, 5)))
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump({"world": world, "samples": samples}, f)
    dist.destroy_process_group()


def busbw(seconds: float, size_mib: int, world: int) -> float:
    """GB/s on the bus for an all_reduce of ``size_mib`` MiB that took ``seconds``."""
    algbw = size_mib * MIB / seconds / 1e9
    return algbw * 2 * (world - 1) / world


def machine_load() -> str:
    """The load average and the busiest processes, to judge how noisy the numbers are."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    top = subprocess.run(
        ["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"],
        capture_output=True, text=True, check=False,
    ).stdout.splitlines()[:5]  # fmt: skip
    busiest = "; ".join(" ".join(line.split()) for line in top)
    return f"load average {load} on {os.cpu_count()} cores; busiest processes (%CPU): {busiest}"


def driver(args: argparse.Namespace) -> None:
    mpirun = shutil.which("mpirun", path=os.path.dirname(sys.executable)) or shutil.which("mpirun")
    if mpirun is None:
        sys.exit("no mpirun: pip install mpich")
    results = []
    print(f"before: {machine_load()}")
    for world in args.world_sizes:
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "samples.json")
            command = [
                mpirun, "-n", str(world), sys.executable, os.path.abspath(__file__), "--worker",
                "--package", args.package, "--json", out, "--rounds", str(args.rounds),
                "--sizes", ",".join(map(str, args.sizes)),
            ]  # fmt: skip
            subprocess.run(command, check=True)
            with open(out) as f:
                results.append(json.load(f))
    print(f"after:  {machine_load()}\n")

    backend = importlib.import_module(args.package).BACKEND_NAME
    columns = f"{backend + ' busbw GB/s':>24}  {'gloo busbw GB/s':>24}"
    header = f"{'ranks':>5} {'size':>7}  {columns}  ratio"
    print(f"all_reduce float32, {args.rounds} rounds, min / median / max\n{header}")
    table = []
    for result in results:
        world = result["world"]
        for size, by_backend in result["samples"].items():
            stats = {}
            for name, seconds in by_backend.items():
                bws = sorted(busbw(s, int(size), world) for s in seconds)
                stats[name] = (bws[0], statistics.median(bws), bws[-1])
            ratio = stats[backend][1] / stats["gloo"][1]
            cells = ["{:6.2f} {:6.2f} {:6.2f}".format(*stats[name]) for name in (backend, "gloo")]
            print(f"{world:>5} {size + ' MiB':>7}  {cells[0]:>24}  {cells[1]:>24}  {ratio:5.2f}x")
            table.append({"ranks": world, "MiB": int(size), "ratio": ratio, **stats})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser.add_argument("--package", required=True, help="generated package, e.g. mpi_collectives")
    parser.add_argument("--world-sizes", default="2,4", type=ints)
    parser.add_argument("--sizes", default="1,16,64", type=ints, help="message sizes in MiB")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
