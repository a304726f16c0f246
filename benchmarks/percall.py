"""Per-call cost of a generated backend: microseconds per all_reduce of one float.

World size 1, one process: the cost measured is the backend's own overhead
(dispatch, queueing, the hand-off to its worker thread and back), which is what
every small collective pays. References measured in the same run, alternated
round by round: the `fake` backend (pure c10d dispatch, the floor) and gloo.

    python benchmarks/percall.py --package dummy_collectives [--rounds 15] [--calls 2000]
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import time

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg


def per_call_us(group, calls: int) -> float:
    tensor = torch.ones(1)
    for _ in range(100):  # warm-up
        dist.all_reduce(tensor, group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--package",
        action="append",
        default=[],
        help="generated package to measure (repeatable), e.g. dummy_collectives",
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    groups = {"gloo": dist.group.WORLD, "fake": dist.new_group([0], backend="fake")}
    for package in args.package:
        name = importlib.import_module(package).BACKEND_NAME
        groups[name] = dist.new_group([0], backend=name)

    samples: dict[str, list[float]] = {name: [] for name in groups}
    for _ in range(args.rounds):
        order = list(groups)
        random.shuffle(order)
        for name in order:
            samples[name].append(per_call_us(groups[name], args.calls))

    fake = statistics.median(samples["fake"])
    gloo = statistics.median(samples["gloo"])
    print(f"all_reduce of 1 float, world size 1, {args.rounds} rounds x {args.calls} calls")
    print(f"{'backend':<12} {'min us':>8} {'median':>8} {'max':>8} {'/fake':>7} {'/gloo':>7}")
    results = {}
    for name, values in samples.items():
        median = statistics.median(values)
        results[name] = {
            "min": min(values),
            "median": median,
            "max": max(values),
            "vs_fake": median / fake,
            "vs_gloo": median / gloo,
        }
        print(
            f"{name:<12} {min(values):8.2f} {median:8.2f} {max(values):8.2f} "
            f"{median / fake:7.2f} {median / gloo:7.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
