"""Runs every op case in a process started by a launcher (torchrun, mpirun, srun).

    torchrun --nproc-per-node 3 tests/launched.py
    torchrun --nproc-per-node 3 tests/launched.py --autoload

The launcher provides the rank, world size and rendezvous in the environment.
With --autoload the script, like one that never imports ucx_all_collectives, uses the
backend that `import torch` registered (the package must be installed), and
checks that this loaded nothing before the group was created.
"""

import sys
from pathlib import Path

import torch.distributed as dist

if "--autoload" not in sys.argv:
    import ucx_all_collectives  # noqa: F401  (registers the backend)
elif "ucx_all_collectives" in sys.modules:
    sys.exit("import torch loaded ucx_all_collectives: autoload must only register the backend")
dist.init_process_group("ucx_all")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from harness import Skip  # noqa: E402

ran = 0
for op in sorted(cases.OPS):
    try:
        cases.run(op)
        ran += 1
    except Skip:
        pass
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {ran} ops passed")
dist.destroy_process_group()
