"""What installing the package gives: the backend without importing it, and a clear error under another torch.

A group that names the backend finds it through the ``torch.distributed.backends``
entry point (torch 2.14+), and ``import torch`` registers it through the
``torch.backends`` one (PyTorch's device-backend autoload); the wheel requires the torch release
it was built against, and importing it under another one fails in one line.
"""

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

import mpi_all_collectives
from mpi_all_collectives._torch_check import release

HERE = Path(__file__).resolve().parent

installed = pytest.mark.skipif(
    not any(e.name == "mpi_all" for e in metadata.entry_points(group="torch.backends")),
    reason="needs the package installed (pip install --no-build-isolation .): autoload reads its entry point",
)

# Prints whether the backend is registered, whether the package is loaded, and
# how many threads the process runs (native ones too, where /proc says).
AFTER_IMPORT_TORCH = """
import os, sys, threading
import torch, torch.distributed as dist
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()
print("mpi_all" in dist.Backend.backend_list, "mpi_all_collectives" in sys.modules, threads)
"""


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c CODE`` with ``env`` added to this environment."""
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


@installed
def test_import_torch_registers_the_backend_and_loads_nothing():
    """Autoload registers the name only: no extension loaded, no thread started; AUTOLOAD=0 turns it off."""
    on = python(AFTER_IMPORT_TORCH, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    off = python(AFTER_IMPORT_TORCH, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    registered, loaded, threads = on.stdout.split()
    assert (registered, loaded) == ("True", "False"), on.stdout
    registered_off, _, threads_off = off.stdout.split()
    assert registered_off == "False", off.stdout
    assert threads == threads_off, f"import torch runs {threads} threads with autoload, {threads_off} without"


@installed
def test_a_group_finds_the_backend_by_name_alone():
    """torch 2.14+ loads the ``torch.distributed.backends`` entry point when a group names the
    backend, autoload off; torch 2.13 has only autoload. A lone process is a world of one."""
    lazy = tuple(map(int, release(torch.__version__).split("."))) >= (2, 14)
    code = """
import sys, torch, torch.distributed as dist
assert "mpi_all" not in dist.Backend.backend_list or not LAZY
dist.init_process_group("mpi_all", store=dist.HashStore(), rank=0, world_size=1)
assert dist.get_backend() == "mpi_all" and "mpi_all_collectives" in sys.modules
t = torch.arange(3.0)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0], t
dist.destroy_process_group()
print("ok")
""".replace("LAZY", str(lazy))
    result = python(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0" if lazy else "1")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


@installed
def test_the_wheel_requires_the_torch_release_it_was_built_against():
    needs = [r for r in metadata.requires("mpi-all-collectives") if "extra ==" not in r]
    assert needs == [f"torch=={release(torch.__version__)}.*"]


@installed
def test_a_script_that_never_imports_the_package_uses_the_backend():
    """init_process_group("mpi_all") without ``import mpi_all_collectives``: a lone process is an MPI world of one."""
    code = """
import sys, torch, torch.distributed as dist
dist.init_process_group("mpi_all", store=dist.HashStore(), rank=0, world_size=1)
assert dist.get_backend() == "mpi_all" and "mpi_all_collectives" in sys.modules
t = torch.arange(3.0)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0], t
dist.destroy_process_group()
print("ok")
"""
    result = python(code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_importing_a_build_for_another_torch_fails_in_one_line(tmp_path: Path):
    """A copy of the built package whose recorded torch is 1.0.0 fails to import, saying so; the true one imports."""
    copy = tmp_path / "mpi_all_collectives"
    shutil.copytree(Path(mpi_all_collectives.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    build_info = copy / "_build_info.py"
    true_info = build_info.read_text()
    build_info.write_text('TORCH_VERSION = "1.0.0"\n')
    code = f"""
import importlib, sys
try:
    import mpi_all_collectives
except ImportError as e:
    print(e)
for name in [m for m in sys.modules if m.startswith("mpi_all_collectives")]:
    del sys.modules[name]
open({str(build_info)!r}, "w").write({true_info!r})
importlib.invalidate_caches()
import mpi_all_collectives
print(mpi_all_collectives.__file__)
"""
    result = python(code, PYTHONPATH=str(tmp_path), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"mpi_all_collectives was built against torch 1.0.0 but this is torch {torch.__version__}:"
        " rebuild it with `pip install --no-build-isolation .` in its project folder",
        str(copy / "__init__.py"),
    ], result.stdout
