{%- set p = project() -%}
{% if p.impl == "mpi" -%}
"""Runs every op case in a process started by an MPI launcher (mpirun, mpiexec, srun).

    mpirun -n 3 python tests/launched.py          # {{ p.package }}.init_process_group_from_mpi()
    mpirun -n 3 python tests/launched.py --plain  # init_process_group("{{ p.name }}", rank=, world_size=)

--plain takes the rank and world size from the launcher's environment and
needs MASTER_ADDR and MASTER_PORT; --swap-ranks does the same with ranks
numbered unlike MPI's, which must fail with a clear error.
"""
{%- else -%}
"""Runs every op case in a process started by a launcher (torchrun, mpirun, srun).

    torchrun --nproc-per-node 3 tests/launched.py
    torchrun --nproc-per-node 3 tests/launched.py --autoload

The launcher provides the rank, world size and rendezvous in the environment.
With --autoload the script, like one that never imports {{ p.package }}, uses the
backend that `import torch` registered (the package must be installed), and
checks that this loaded nothing before the group was created.
"""
{%- endif %}

import sys
from pathlib import Path

import torch.distributed as dist

{% if p.impl == "mpi" -%}
import {{ p.package }}  # noqa: F401  (registers the backend)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from harness import Skip  # noqa: E402

if "--plain" in sys.argv or "--swap-ranks" in sys.argv:
    rank, world_size = {{ p.package }}.launcher_rank_and_size()
    if "--swap-ranks" in sys.argv:
        rank = world_size - 1 - rank
    dist.init_process_group("{{ p.name }}", rank=rank, world_size=world_size)
else:
    {{ p.package }}.init_process_group_from_mpi()
{% else -%}
if "--autoload" not in sys.argv:
    import {{ p.package }}  # noqa: F401  (registers the backend)
elif "{{ p.package }}" in sys.modules:
    sys.exit("import torch loaded {{ p.package }}: autoload must only register the backend")
dist.init_process_group("{{ p.name }}")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from harness import Skip  # noqa: E402

{% endif -%}
ran = 0
for op in sorted(cases.OPS):
    try:
        cases.run(op)
        ran += 1
    except Skip:
        pass
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {ran} ops passed")
dist.destroy_process_group()
