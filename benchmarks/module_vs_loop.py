"""The benchmark module against a plain ``dist.all_reduce`` loop, in the same processes.

Runs the generated project's own test case ``bench_and_a_plain_loop``
(tests/cases.py) on a cluster of its test harness: each round times
all_reduce with ``NAME_collectives.bench``'s sweep and then with a plain loop
of ``dist.all_reduce(t)``, both as the slowest rank saw it. Prints
min/median/max microseconds per call of each and the median of the per-round
ratios (module / loop: 1.00 means the module reports what the loop measures).

    python benchmarks/module_vs_loop.py /tmp/bp/store_all --sizes 1M,16M --rounds 5
    python benchmarks/module_vs_loop.py /tmp/bp/mpi_all --sizes 1M,16M,64M --world-sizes 2,4

The project must be built in place (``python setup.py build_ext --inplace``)
or installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path


def size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}/{statistics.median(values):.0f}/{max(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", type=Path, help="a generated project's folder")
    parser.add_argument("--world-sizes", default="2")
    parser.add_argument("--sizes", default="1M,16M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    paths = [str(args.project.resolve() / "tests"), str(args.project.resolve() / "src")]
    sys.path[:0] = paths
    # for the ranks too
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    from harness import Cluster

    for world in [int(w) for w in args.world_sizes.split(",")]:
        cluster = Cluster(world)
        try:
            for text in args.sizes.split(","):
                result = cluster.run("bench_and_a_plain_loop", size=size(text), iters=args.iters,
                                     rounds=args.rounds)[0]  # fmt: skip
                module = [m for m, _ in result["rounds"]]
                loop = [plain for _, plain in result["rounds"]]
                ratio = statistics.median(m / plain for m, plain in result["rounds"])
                print(f"ranks {world} size {text:>4}: module {spread(module)} us, "
                      f"plain loop {spread(loop)} us (min/med/max), module/loop {ratio:.2f}, "
                      f"overlapping calls {result['overlapping']}", flush=True)  # fmt: skip
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
