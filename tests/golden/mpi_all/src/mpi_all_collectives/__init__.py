"""The "mpi_all" backend for torch.distributed.

Importing this package registers the backend::

    import torch.distributed as dist
    import mpi_all_collectives  # noqa: F401

    dist.init_process_group("mpi_all", rank=rank, world_size=world_size)

Once the package is installed, ``import torch`` registers it too (see
``_mpi_all_collectives_autoload``), so scripts that never import it work as well.

In a process started by mpirun, mpiexec or srun, one call does it all::

    mpi_all_collectives.init_process_group_from_mpi()

MPI is initialised when the first process group is created (or by
``init_process_group_from_mpi``), never at import, and finalised at exit if
this package initialised it.
"""

import atexit
import functools
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from ._torch_check import check_torch, load_error

check_torch()  # a build for another torch fails here, in one line, not with undefined symbols
try:
    from . import _C  # noqa: E402
except ImportError as e:  # a library it links is missing: name it, and the way out
    raise ImportError(load_error(e)) from None

__version__ = "0.1.0"

#: The name to pass to ``torch.distributed.init_process_group``.
BACKEND_NAME = "mpi_all"
#: The devices the backend is registered for.
DEVICES = ["cpu", "cuda"]
#: The collectives the backend implements; every other one raises a RuntimeError.
OPS = [
    "broadcast",
    "allreduce",
    "allreduce_coalesced",
    "reduce",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "gather",
    "gather_single",
    "scatter",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "alltoall_base",
    "alltoall",
    "send",
    "recv",
    "recvAnysource",
    "barrier",
]
#: Whether this build handles CUDA tensors.
WITH_CUDA = _C.WITH_CUDA
#: The options of a process group (the ``Options`` struct of csrc/ops.hpp):
#: ``init_process_group(BACKEND_NAME, pg_options=Options(verbose=True))``. A field
#: not given takes its value from the environment variable ``MPI_ALL_<FIELD>``.
Options = _C.Options


def register(devices: list[str] | None = None) -> None:
    """Registers the backend with torch.distributed for ``devices`` (default: :data:`DEVICES`).

    Importing the package does it with the defaults. A PrivateUse1 device (an
    out-of-tree accelerator, once its package named it) may be added by name:
    ``register([*DEVICES, "npu"])``; process groups created afterwards use the
    backend for its tensors too.
    """
    dist.Backend.register_backend(
        BACKEND_NAME, _C.create_backend, extended_api=True, devices=list(devices or DEVICES)
    )


register()


def group_options(group: dist.ProcessGroup | None = None) -> Options:
    """The :class:`Options` ``group`` (default: the default group) was created with."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.group_options(pg._get_backend(torch.device(DEVICES[0])))


def flight_record() -> dict:
    """This process's flight recorder: the last ops of every group of this backend.

    The dict c10d's FlightRecorder dumps for NCCL (``"version"``, ``"pg_config"``,
    ``"pg_status"``, ``"entries"``), one entry per op with its collective number,
    sizes, dtypes, state ("scheduled", "started", "completed", "failed",
    "timed out"), times and, for a failed op, its ``"error"``. The ring keeps the
    last ``TORCH_FR_BUFFER_SIZE`` ops (2000 by default; 0 turns it off).
    """
    import pickle

    return pickle.loads(_C.flight_record())


def dump_flight_record() -> str:
    """Writes :func:`flight_record` where a timeout writes it; returns the file's path.

    That is ``TORCH_FR_DUMP_TEMP_FILE`` (default ``/tmp/nccl_trace_rank_``) followed
    by this process's global rank, which torch's analyser reads
    (``python -m torch.distributed.flight_recorder.fr_trace DIR``).
    """
    return _C.dump_flight_record(dist.get_rank() if dist.is_initialized() else 0)


def free_port() -> int:
    """A TCP port for rank 0's store (``MASTER_PORT``): free now, and below the kernel's
    ephemeral range, where the local end of a new connection cannot take it before rank 0
    listens (a port bound to 0 and released can be: EADDRINUSE)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    below = range(max(1024, ephemeral - 16384), ephemeral)
    for port in random.sample(below, min(64, len(below))):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # all taken: one the kernel hands out
        s.bind(("", 0))
        return s.getsockname()[1]

atexit.register(_C.mpi_finalize)  # does nothing unless this package initialised MPI

#: Where launchers put each process's rank and the number of processes:
#: MPICH and Intel MPI (Hydra), Open MPI, PMIx, Slurm's srun, MVAPICH.
LAUNCHER_VARIABLES = [
    ("PMI_RANK", "PMI_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
]
#: The same for the rank among the processes on this host.
LOCAL_RANK_VARIABLES = ["MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK"]


def launcher_rank_and_size() -> tuple[int, int] | None:
    """``(rank, world_size)`` as the launcher (mpirun, srun...) set them, without initialising MPI.

    None when no known launcher variable is set.
    """
    for rank, size in LAUNCHER_VARIABLES:
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return None


def set_env_from_mpi() -> tuple[int, int]:
    """Fills the ``env://`` variables from MPI; returns ``(rank, world_size)``.

    RANK and WORLD_SIZE come from MPI_COMM_WORLD (this initialises MPI), and
    LOCAL_RANK from the launcher where it says. Unless MASTER_ADDR and
    MASTER_PORT are both set, rank 0 picks what is missing (its host name, a
    free port) and broadcasts it with MPI, so this works across hosts with
    nothing set by hand. Every rank must call it.
    """
    rank, size = _C.mpi_world()
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(size)
    local = next((os.environ[v] for v in LOCAL_RANK_VARIABLES if v in os.environ), None)
    if local is not None:
        os.environ.setdefault("LOCAL_RANK", local)
    if not ("MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ):
        mine = ""
        if rank == 0:
            address = os.environ.get("MASTER_ADDR") or socket.gethostname()
            port = os.environ.get("MASTER_PORT") or str(free_port())
            mine = f"{address} {port}"
        address, port = _C.mpi_broadcast(mine).decode().split(" ")
        os.environ["MASTER_ADDR"] = address
        os.environ["MASTER_PORT"] = port
    return rank, size


def init_process_group_from_mpi(**kwargs) -> None:
    """``init_process_group("mpi_all")`` in a process started by mpirun, mpiexec or srun.

    Sets the ``env://`` variables with :func:`set_env_from_mpi`, then calls
    ``torch.distributed.init_process_group`` with ``kwargs`` (timeout=...).
    """
    set_env_from_mpi()
    dist.init_process_group(BACKEND_NAME, **kwargs)


def mpirun_command() -> list[str]:
    """The MPI launcher that starts ranks on this machine, to be followed by ``-n N PROGRAM``.

    ``MPI_ALL_MPIRUN`` if set (split as a shell would: ``"mpirun.openmpi --bind-to none"``);
    else the ``mpirun`` beside this Python (``pip install mpich`` puts it there), else
    the first one on the ``PATH``. Open MPI's mpirun refuses more ranks than cores
    and, as root, refuses to start at all: it gets ``--oversubscribe`` and (as root)
    ``--allow-run-as-root`` unless the command has them. Raises FileNotFoundError
    when there is no mpirun.
    """
    setting = os.environ.get("MPI_ALL_MPIRUN", "")
    command = shlex.split(setting)
    if not command:
        beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
        found = beside if os.path.isfile(beside) else shutil.which("mpirun")
        if found is None:
            raise FileNotFoundError("no mpirun found: pip install mpich, or set MPI_ALL_MPIRUN")
        command = [found]
    if mpi_launcher(command[0])[0] == "openmpi":
        wanted = ["--oversubscribe", *(["--allow-run-as-root"] if os.geteuid() == 0 else [])]
        command += [flag for flag in wanted if flag not in command]
    return command


@functools.cache
def mpi_launcher(mpirun: str) -> tuple[str, int]:
    """Which launcher ``mpirun`` is, from its ``--version``: ``(kind, major version)``, kind
    being "hydra" (MPICH's and Intel MPI's), "openmpi" or "" (another one, or it does
    not say); the version is 0 where it is not Open MPI's or cannot be read."""
    try:
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "", 0
    version = done.stdout + done.stderr
    if "HYDRA" in version or "Intel(R) MPI" in version:
        return "hydra", 0
    if "Open MPI" in version or "OpenRTE" in version:
        major = re.search(r"\((?:Open MPI|OpenRTE)\) (\d+)\.", version)  # "mpirun (Open MPI) 4.1.4"
        return "openmpi", int(major.group(1)) if major else 0
    return "", 0
