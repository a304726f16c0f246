"""Sends that arrive, a FileStore that stays small, and a quiet exit (issue 32), beside gloo.

Three figures, each for a generated backend and gloo in the same run:

- send: rank 1 sends 4 MiB (far above UCX's rendezvous threshold) and, once
  the send returned, destroys its group; rank 0 posts its receive 5 s later.
  Whether the message arrived, and the CPU seconds rank 1 spent in the send.
- filestore: two ranks over ``file://`` run N all_reduces of a given size;
  the size of the FileStore's file after them, and of what is left beside it.
- exit: rank 0, which hosts the TCPStore, exits right after three
  all_reduces; the lines rank 1 prints in the 4 s it lives on.

    python benchmarks/nothing_lost.py send --package ucx_all_collectives [--rounds 3]
    python benchmarks/nothing_lost.py filestore --package store_all_collectives --ops 100 --kib 1024
    python benchmarks/nothing_lost.py exit --package dummy_collectives

Each round starts fresh processes (the ranks), so the figures are whole-process ones.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

SEND_ELEMENTS = 1 << 20  # 4 MiB of float32
LATE_S = 5.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rank_main(kind: str, backend: str, package: str, rank: int, url: str, arg: str) -> None:
    """One rank of one figure; prints its result on its last line."""
    if package:
        importlib.import_module(package)
    dist.init_process_group(backend, init_method=url, rank=rank, world_size=2)
    if kind == "send":
        sent = torch.arange(SEND_ELEMENTS, dtype=torch.float32)
        if rank == 1:
            cpu = cpu_seconds()
            dist.send(sent, 0, tag=4)
            cpu = cpu_seconds() - cpu
            dist.destroy_process_group()
            print(f"cpu {cpu:.3f}")
        else:
            time.sleep(LATE_S)
            got = torch.zeros(SEND_ELEMENTS)
            try:
                dist.recv(got, 1, tag=4)
                print(f"arrived {int(torch.equal(got, sent))}")
            except RuntimeError:
                print("arrived 0")
    elif kind == "filestore":
        ops, kib = (int(x) for x in arg.split(","))
        for _ in range(ops):
            dist.all_reduce(torch.ones(kib * 256))
        dist.barrier()
        if rank == 0:
            path = url[len("file://") :]
            left = sum(os.path.getsize(f) for f in glob.glob(f"{path}.{backend}/*/*"))
            print(f"file {os.path.getsize(path)} left {left}")
        dist.barrier()
    elif kind == "exit":
        for _ in range(3):
            dist.all_reduce(torch.ones(4))
        if rank == 1:
            time.sleep(4)


def run_round(kind: str, backend: str, package: str, arg: str) -> list[str]:
    """Both ranks' output (stdout and stderr) for one round."""
    with tempfile.TemporaryDirectory() as scratch:
        if kind == "filestore":
            url = "file://" + os.path.join(scratch, "store")
        else:
            port = subprocess.run(
                [sys.executable, "-c", "import dummy_collectives as d; print(d.free_port())"],
                capture_output=True, text=True, check=False,
            ).stdout.strip() or str(29500 + os.getpid() % 400)  # fmt: skip
            url = f"tcp://127.0.0.1:{port}"
        command = [sys.executable, __file__, "--rank-of", kind, backend, package, url, arg]
        ranks = [
            subprocess.Popen(
                [*command, str(rank)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for rank in range(2)
        ]
        return [rank.communicate(timeout=600)[0] for rank in ranks]


def last_value(output: str, word: str) -> float:
    lines = [line for line in output.splitlines() if line.startswith(word + " ")]
    return float(lines[-1].split()[1]) if lines else float("nan")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f} to {max(values):.3f}]"


def main() -> None:
    if sys.argv[1:2] == ["--rank-of"]:
        kind, backend, package, url, arg, rank = sys.argv[2:8]
        rank_main(kind, backend, package, int(rank), url, arg)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=["send", "filestore", "exit"])
    parser.add_argument(
        "--package", required=True, help="the generated package, e.g. ucx_all_collectives"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--kib", type=int, default=1024)
    args = parser.parse_args()
    backend = args.package.removesuffix("_collectives")
    arg = f"{args.ops},{args.kib}"
    for name, package in ((backend, args.package), ("gloo", "")):
        outputs = [run_round(args.kind, name, package, arg) for _ in range(args.rounds)]
        if args.kind == "send":
            arrived = sum(int(last_value(o[0], "arrived") == 1) for o in outputs)
            cpu = [last_value(o[1], "cpu") for o in outputs]
            print(f"{name:>12}: arrived {arrived}/{args.rounds}; CPU s in the send {spread(cpu)}")
        elif args.kind == "filestore":
            sizes = [last_value(o[0], "file") / 1e6 for o in outputs]
            left = [
                float(o[0].split()[-1]) / 1e6 if "left" in o[0] else float("nan") for o in outputs
            ]
            what = f"{args.ops} all_reduces of {args.kib} KiB"
            print(f"{name:>12}: {what}: file {spread(sizes)} MB, beside it {spread(left)} MB")
        else:
            lines = [len(o[1].splitlines()) for o in outputs]
            printed = spread([float(n) for n in lines])
            print(f"{name:>12}: rank 1 printed {printed} lines after rank 0 exited")


if __name__ == "__main__":
    main()
