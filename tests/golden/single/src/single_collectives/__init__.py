"""The "single" backend for torch.distributed.

Importing this package registers the backend::

    import torch.distributed as dist
    import single_collectives  # noqa: F401

    dist.init_process_group("single", rank=rank, world_size=world_size)

Once the package is installed, ``import torch`` registers it too (see
``_single_collectives_autoload``), so scripts that never import it work as well.
"""

import random
import socket

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
BACKEND_NAME = "single"
#: The devices the backend is registered for.
DEVICES = ["cuda"]
#: The collectives the backend implements; every other one raises a RuntimeError.
OPS = [
    "allreduce",
]
#: Whether this build handles CUDA tensors.
WITH_CUDA = _C.WITH_CUDA
#: The options of a process group (the ``Options`` struct of csrc/ops.hpp):
#: ``init_process_group(BACKEND_NAME, pg_options=Options(verbose=True))``. A field
#: not given takes its value from the environment variable ``SINGLE_<FIELD>``.
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
