"""The generated MPI backend against the MPI library underneath it, and gloo, in one MPI job.

For each world size, one ``mpirun -n N`` job measures, on the same tensors and
in rounds of shuffled order, each block after a few untimed calls (so that load
on a shared machine, and the switch from one kind to the next, hit all of them
alike):

- ``backend``: ``dist.all_reduce`` over the generated ``--impl mpi`` backend;
- ``MPI_Allreduce`` and ``MPI_Iallreduce`` (+ ``MPI_Wait``), in place, through
  mpi4py on the same MPI library;
- ``gloo``: ``dist.all_reduce`` over a gloo group of the same ranks.

It prints, per size, min/median/max busbw (nccl-tests: 2(n-1)/n x bytes / time)
and the ratios backend/best-MPI and backend/gloo (median of the per-round
ratios, with their min and max; the best MPI call is the one with the lower
median time). A size of 4 bytes is latency: the table shows
the time per call too. ``--late`` measures instead the CPU that rank 0 uses
while it waits 3 s for a late rank 1, in the backend and in MPI_Allreduce.

    python benchmarks/mpi_ratio.py --package mpi_all_collectives --world-sizes 2,4
    python benchmarks/mpi_ratio.py --package mpi_all_collectives --late

Needs mpi4py and the generated package importable (PYTHONPATH=.../src).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

KINDS = ["backend", "MPI_Allreduce", "MPI_Iallreduce", "gloo"]


def parse_size(text: str) -> int:
    """``4``, ``1M``, ``64M`` (binary units) as bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def cpu_seconds() -> float:
    """User and system CPU time of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rank_main(args: argparse.Namespace) -> None:
    """What every rank of the mpirun job runs."""
    import mpi4py

    mpi4py.rc.thread_level = "multiple"
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    package = importlib.import_module(args.package)
    package.init_process_group_from_mpi()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    kinds = [kind for kind in KINDS if kind != "gloo" or not args.no_gloo]
    gloo = None if args.no_gloo else dist.new_group(backend="gloo")

    def allreduce(kind: str, tensor: torch.Tensor) -> None:
        if kind == "backend":
            dist.all_reduce(tensor)
        elif kind == "gloo":
            dist.all_reduce(tensor, group=gloo)
        elif kind == "MPI_Allreduce":
            comm.Allreduce(MPI.IN_PLACE, tensor.numpy())
        else:
            comm.Iallreduce(MPI.IN_PLACE, tensor.numpy()).Wait()

    if args.late:
        report = {}
        for kind in ["backend", "MPI_Allreduce", "backend", "MPI_Allreduce"]:
            tensor = torch.ones(1)
            comm.Barrier()
            if rank == 1:
                time.sleep(3.0)
            start, cpu = time.perf_counter(), cpu_seconds()
            allreduce(kind, tensor)
            wall, used = time.perf_counter() - start, cpu_seconds() - cpu
            report.setdefault(kind, []).append({"wall_s": wall, "cpu_s": used})
        if rank == 0:
            print(json.dumps({"late": report}))
        return

    results: dict = {}
    for size in args.sizes.split(","):
        nbytes = parse_size(size)
        tensor = torch.ones(max(1, nbytes // 4))
        iters = max(5, min(args.iters, int(args.iters * 2**20 / max(nbytes, 1)) or 1))
        if nbytes <= 1024:
            iters = args.iters * 50
        for kind in kinds:  # warm-up: connections, algorithms
            for _ in range(3):
                allreduce(kind, tensor)
        for round_ in range(args.rounds):
            # A fresh order each round, the same on every rank: each kind
            # follows each other one about equally often (a rotation would
            # always put the backend right after gloo, whose aftermath slows
            # whatever runs next). A few untimed calls first absorb the switch.
            order = random.Random(round_).sample(kinds, len(kinds))
            for kind in order:
                for _ in range(max(2, iters // 10)):
                    allreduce(kind, tensor)
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    allreduce(kind, tensor)
                elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / iters
                results.setdefault(size, {}).setdefault(kind, []).append(elapsed)
    if rank == 0:
        sizes = {s: parse_size(s) for s in results}
        print(json.dumps({"world": world, "bytes": sizes, "times": results}))
    dist.destroy_process_group()


def busbw(nbytes: int, world: int, seconds: float) -> float:
    return nbytes * 2 * (world - 1) / world / seconds / 1e9


def spread(values: list[float], digits: int = 2) -> str:
    """``median [min-max]``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def print_table(data: dict) -> None:
    world = data["world"]
    print(f"\n## all_reduce, {world} ranks (busbw GB/s, median [min-max] of rounds)\n")
    kinds = [kind for kind in KINDS if kind in next(iter(data["times"].values()))]
    print("| size | " + " | ".join(kinds) + " | backend/best MPI | backend/gloo |")
    print("|---" * (len(kinds) + 3) + "|")
    for size, times in data["times"].items():
        nbytes = data["bytes"][size]
        cells = []
        for kind in kinds:
            if nbytes <= 1024:
                cells.append(spread([t * 1e6 for t in times[kind]], 1) + " us")
            else:
                cells.append(spread([busbw(nbytes, world, t) for t in times[kind]]))
        rounds = range(len(times["backend"]))
        # The best MPI call is the one with the lower median; the minimum of the
        # two in each round would favour MPI by the noise alone.
        best = min(("MPI_Allreduce", "MPI_Iallreduce"), key=lambda k: statistics.median(times[k]))
        vs_mpi = [times[best][r] / times["backend"][r] for r in rounds]
        vs_gloo = (
            spread([times["gloo"][r] / times["backend"][r] for r in rounds])
            if "gloo" in times
            else "-"
        )
        print(f"| {size} | " + " | ".join(cells) + f" | {spread(vs_mpi)} | {vs_gloo} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", required=True, help="e.g. mpi_all_collectives")
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--sizes", default="4,1M,16M,64M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20, help="calls per round at 1 MiB (scaled)")
    parser.add_argument("--no-gloo", action="store_true", help="leave gloo out of the job")
    parser.add_argument("--late", action="store_true", help="CPU of rank 0 waiting 3 s for rank 1")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args)
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}")
    worlds = [2] if args.late else [int(w) for w in args.world_sizes.split(",")]
    for world in worlds:
        command = [args.mpirun, "-n", str(world), sys.executable, __file__, "--rank", *sys.argv[1:]]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        data = json.loads(lines[-1])
        if args.late:
            print("\n## CPU of rank 0 while it waits 3 s for rank 1 (all_reduce of one float)\n")
            print("| call | wall s | CPU s | CPU % of a core |")
            print("|---|---|---|---|")
            for kind, samples in data["late"].items():
                for s in samples:
                    share = 100 * s["cpu_s"] / s["wall_s"]
                    print(f"| {kind} | {s['wall_s']:.2f} | {s['cpu_s']:.3f} | {share:.0f}% |")
        else:
            print_table(data)
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
