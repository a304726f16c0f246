"""Runs every op case in a process started by a launcher (torchrun, mpirun, srun).

    torchrun --nproc-per-node 3 tests/launched.py

The launcher provides the rank, world size and rendezvous in the environment.
"""

import sys
from pathlib import Path

import torch.distributed as dist

import ucx_all_collectives  # noqa: F401  (registers the backend)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from harness import Skip  # noqa: E402

dist.init_process_group("ucx_all")
ran = 0
for op in sorted(cases.OPS):
    try:
        cases.run(op)
        ran += 1
    except Skip:
        pass
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {ran} ops passed")
dist.destroy_process_group()
