"""CPU a rank burns while it has nothing to do, and while it waits for a late peer.

Two ranks. For each backend, alternated round by round:

- idle: the group exists, no op is pending, the rank sleeps 3 s;
- waiting: rank 1 calls all_reduce at once, rank 0 joins 3 s later; rank 1's
  CPU time over that call (every thread of the process) is what waiting costs.

Printed as a percentage of one core (CPU seconds over wall seconds), median and
range over the rounds. gloo is the reference measured in the same run.

    python benchmarks/cpu_wait.py --package store_all_collectives [--rounds 3]
    mpirun -n 2 python benchmarks/cpu_wait.py --package mpi_all_collectives

Under mpirun the ranks come from the launcher; otherwise the script starts two
processes itself.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WAIT_S = 3.0


def cpu_seconds() -> float:
    """User and system CPU time of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def idle_percent(group) -> float:
    """CPU use of this rank while the group has nothing to do."""
    dist.barrier(group=group)
    start_cpu, start = cpu_seconds(), time.monotonic()
    time.sleep(WAIT_S)
    return 100 * (cpu_seconds() - start_cpu) / (time.monotonic() - start)


def waiting_percent(group, sync, rank: int) -> float:
    """CPU use of rank 1 inside an all_reduce that rank 0 joins WAIT_S late."""
    dist.barrier(group=sync)
    tensor = torch.ones(1024)
    if rank == 0:
        time.sleep(WAIT_S)
        dist.all_reduce(tensor, group=group)
        return float("nan")
    start_cpu, start = cpu_seconds(), time.monotonic()
    dist.all_reduce(tensor, group=group)
    took = time.monotonic() - start
    assert took > WAIT_S * 0.8, f"the all_reduce returned after {took:.2f} s, before its peer came"
    return 100 * (cpu_seconds() - start_cpu) / took


Samples = dict[str, dict[str, list[float]]]  # backend -> measure -> % of a core per round


def measure(rank: int, packages: list[str], rounds: int) -> Samples:
    """Alternates the backends round by round; returns rank 1's samples."""
    for package in packages:
        importlib.import_module(package)
    timeout = timedelta(seconds=60)
    sync = dist.new_group(backend="gloo", timeout=timeout)
    groups = {"gloo": sync}
    for package in packages:
        name = importlib.import_module(package).BACKEND_NAME
        groups[name] = dist.new_group(backend=name, timeout=timeout)
    samples: Samples = {name: {"idle": [], "waiting": []} for name in groups}
    for i in range(rounds):
        order = list(groups) if i % 2 == 0 else list(reversed(groups))
        for name in order:
            samples[name]["idle"].append(idle_percent(groups[name]))
            samples[name]["waiting"].append(waiting_percent(groups[name], sync, rank))
    return samples


def report(samples: Samples) -> None:
    """One line per backend: median and range of each measure."""
    print(f"CPU of one rank, % of a core, over {WAIT_S:.0f} s (median [min-max])")
    print(f"{'backend':<24} {'idle':>20} {'waiting for a peer':>24}")
    for name, measures in samples.items():
        cells = []
        for values in measures.values():
            cells.append(f"{statistics.median(values):5.1f} [{min(values):.1f}-{max(values):.1f}]")
        print(f"{name:<24} {cells[0]:>20} {cells[1]:>24}")


def run_rank(rank: int, world: int, port: int, packages: list[str], rounds: int) -> None:
    """One spawned rank: a TCPStore rendezvous, then the measures."""
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    samples = measure(rank, packages, rounds)
    if rank == 1:
        report(samples)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--package", action="append", default=[], help="generated package (repeatable)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    launched = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    if launched is None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(
            run_rank, args=(2, port, args.package, args.rounds), nprocs=2, start_method="spawn"
        )
        return
    # Under mpirun: the generated mpi package sets the env:// rendezvous up.
    rank, world = importlib.import_module(args.package[0]).set_env_from_mpi()
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    samples = measure(rank, args.package, args.rounds)
    if rank == 1:
        report(samples)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
