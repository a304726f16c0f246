"""Remove the files the chosen implementation does not use.

Every file of the template is rendered for every project; the few that belong
to one implementation only are deleted here, from the freshly generated folder.
"""

from pathlib import Path

IMPL = {{ cookiecutter.impl | tojson }}

# Files that only some implementations use.
ONLY_FOR = {
    "csrc/runtime/store_exchange.hpp": {"store"},
    "csrc/runtime/store_exchange.cpp": {"store"},
    "csrc/runtime/mpi_comm.hpp": {"mpi"},
    "csrc/runtime/mpi_comm.cpp": {"mpi"},
    "csrc/runtime/ucx_comm.hpp": {"ucx"},
    "csrc/runtime/ucx_comm.cpp": {"ucx"},
    "tests/test_failures.py": {"store", "mpi", "ucx"},
    "tests/test_matrix.py": {"store", "mpi", "ucx"},
}

for path, impls in ONLY_FOR.items():
    if IMPL not in impls:
        Path(path).unlink()

# Bytecode a template folder may have picked up (its fake accelerator imported
# in place) is no part of a project.
for cache in sorted(Path(".").rglob("__pycache__"), reverse=True):
    for stale in cache.iterdir():
        stale.unlink()
    cache.rmdir()
