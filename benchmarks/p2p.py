"""Point-to-point: send/recv ping-pong latency, and CPU while a receive waits.

Two ranks. For each backend, alternated round by round in a shuffled order
(gloo is the reference measured in the same run):

- ping-pong: rank 0 sends, rank 1 receives and sends back, `--iters` times;
  one-way time is half a round trip, at 4 B and 1 MiB;
- waiting: rank 1 posts a recv that rank 0's send reaches WAIT_S later; the
  CPU time of both processes over that wait (every thread, rank 0's store
  server included) is what a waiting receive costs.

Printed per backend: median and range over the rounds, and the ratio of the
medians to gloo's (below 1: faster than gloo).

    python benchmarks/p2p.py --package store_all_collectives --package ucx_all_collectives
    mpirun -n 2 python benchmarks/p2p.py --package mpi_all_collectives
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from cpu_wait import cpu_seconds

WAIT_S = 1.0
SIZES = {"4 B": 1, "1 MiB": 256 * 1024}  # float32 elements

Samples = dict[str, dict[str, list[float]]]  # backend -> measure -> value per round


def one_way_us(group, rank: int, elements: int, iters: int) -> float:
    """Half the round-trip time of a send/recv ping-pong, in microseconds."""
    tensor = torch.zeros(elements)
    peer = 1 - rank

    def bounce(n: int) -> None:
        for _ in range(n):
            if rank == 0:
                dist.send(tensor, peer, group=group)
                dist.recv(tensor, peer, group=group)
            else:
                dist.recv(tensor, peer, group=group)
                dist.send(tensor, peer, group=group)

    bounce(max(1, iters // 10))  # warm-up
    start = time.perf_counter()
    bounce(iters)
    return (time.perf_counter() - start) / iters / 2 * 1e6


def waiting_percent(group, sync, rank: int) -> float:
    """CPU use of this process while rank 1's recv waits WAIT_S for rank 0's send."""
    dist.barrier(group=sync)
    tensor = torch.zeros(4)
    start_cpu, start = cpu_seconds(), time.monotonic()
    if rank == 0:
        time.sleep(WAIT_S)
        dist.send(tensor, 1, group=group)
    else:
        dist.recv(tensor, 0, group=group)
        took = time.monotonic() - start
        assert took > WAIT_S * 0.8, f"the recv returned after {took:.2f} s, before its sender sent"
    dist.barrier(group=sync)  # rank 0 measures until the receive is done too
    return 100 * (cpu_seconds() - start_cpu) / (time.monotonic() - start)


def measure(rank: int, packages: list[str], rounds: int, iters: int) -> Samples:
    """Alternates the backends round by round; returns this rank's samples."""
    timeout = timedelta(seconds=60)
    sync = dist.new_group(backend="gloo", timeout=timeout)
    groups = {"gloo": sync}
    for package in packages:
        name = importlib.import_module(package).BACKEND_NAME
        groups[name] = dist.new_group(backend=name, timeout=timeout)
    samples: Samples = {name: {} for name in groups}
    for i in range(rounds):
        order = list(groups)
        random.Random(i).shuffle(order)  # the same order on both ranks
        for name in order:
            for label, elements in SIZES.items():
                dist.barrier(group=sync)
                us = one_way_us(groups[name], rank, elements, iters)
                samples[name].setdefault(f"{label} (us)", []).append(us)
            cpu = waiting_percent(groups[name], sync, rank)
            samples[name].setdefault(f"waiting, rank {rank} (%)", []).append(cpu)
    return samples


def report(samples: Samples) -> None:
    """A block per measure: each backend's median [range], and its ratio to gloo."""
    print("send/recv between 2 ranks: one-way time, and CPU (% of a core) while a recv waits")
    for measure_name in samples["gloo"]:
        reference = statistics.median(samples["gloo"][measure_name])
        print(f"\n{measure_name}")
        for name, measures in samples.items():
            values = measures[measure_name]
            median = statistics.median(values)
            ratio = median / reference if reference > 0 else float("nan")
            spread = f"[{min(values):.1f}-{max(values):.1f}]"
            print(f"  {name:<24} {median:9.1f} {spread}  x{ratio:.2f} gloo")


def run(rank: int, packages: list[str], rounds: int, iters: int) -> None:
    """Measures, then rank 1 prints both ranks' samples (rank 0's CPU included)."""
    for package in packages:
        importlib.import_module(package)
    samples = measure(rank, packages, rounds, iters)
    gathered: list[Samples | None] = [None, None]
    dist.all_gather_object(gathered, samples)
    if rank == 1:
        merged = gathered[1]
        for name, measures in gathered[0].items():
            merged[name].update({k: v for k, v in measures.items() if k.startswith("waiting")})
        report(merged)
    dist.destroy_process_group()


def run_rank(rank: int, port: int, packages: list[str], rounds: int, iters: int) -> None:
    """One spawned rank: a TCPStore rendezvous, then run()."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
        timeout=timedelta(seconds=60),
    )  # fmt: skip
    run(rank, packages, rounds, iters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--package", action="append", default=[], help="generated package (repeatable)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=100, help="round trips per sample")
    args = parser.parse_args()
    launched = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    if launched is None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(
            run_rank, args=(port, args.package, args.rounds, args.iters), nprocs=2,
            start_method="spawn",
        )  # fmt: skip
        return
    # Under mpirun: the generated mpi package sets the env:// rendezvous up.
    rank, world = importlib.import_module(args.package[0]).set_env_from_mpi()
    assert world == 2, "a benchmark for 2 ranks"
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    run(rank, args.package, args.rounds, args.iters)


if __name__ == "__main__":
    main()
