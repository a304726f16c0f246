"""A fake accelerator for the tests: a PrivateUse1 device on a machine without one.

Its memory cannot be read by the host (a read faults), its streams really run
asynchronously (a thread each), its events mark points in them, and its caching
allocator reuses a block freed while other streams use it (``record_stream``)
only once they reached the free. Ops run as kernels on the current stream
(copies, ``fill_``, ``zero_``) or fall back to the CPU. See fake_accelerator.cpp.

    import fake_accelerator as fake

    fake.load()                      # builds it once per torch version, names it "fake"
    t = torch.ones(4, device="fake")
    fake.sleep(100)                  # the current stream is busy for 100 ms
    t.fill_(2)                       # runs after the sleep; returns at once
    fake.synchronize()
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

#: The device's name, unless load() is given another one.
NAME = "fake"
#: The C++ source of the device.
SOURCE = Path(__file__).with_name("fake_accelerator.cpp")

_library: str | None = None


def build(verbose: bool = False) -> str:
    """Compiles the device for this torch and Python, once (later calls find it built); its library's path.

    The build goes to ``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``),
    in a folder of its own for each torch version. The library is loaded into this
    process too (torch's loader does that), but not named: see :func:`load`.
    """
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.expanduser("~/.cache/torch_extensions")
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    directory = os.path.join(root, "fake_accelerator", re.sub(r"\W", "_", f"{python}_torch{torch.__version__}"))
    os.makedirs(directory, exist_ok=True)
    return cpp_extension.load(
        "fake_accelerator", [str(SOURCE)], build_directory=directory, is_python_module=False, verbose=verbose
    )


def load(library: str | None = None, name: str = NAME) -> torch.device:
    """Loads the device (``library``, else :func:`build`'s) into this process, named ``name``; returns it.

    ``name`` is what ``torch.device`` then accepts: "fake", or the name of the
    out-of-tree device a backend is registered for, which this one stands in for.
    """
    global _library
    if _library is None:
        library = library or build()
        if library not in torch.ops.loaded_libraries:
            torch.ops.load_library(library)
        _library = library
    if torch._C._get_privateuse1_backend_name() != name:
        torch.utils.rename_privateuse1_backend(name)
    if not hasattr(torch, name):  # torch looks for the device's module as torch.<name>
        torch._register_device_module(name, sys.modules[__name__])
    return device()


def device() -> torch.device:
    """The device (there is one)."""
    return torch.device(torch._C._get_privateuse1_backend_name(), 0)


def is_available() -> bool:
    """Whether the device can be used (``torch.<name>.is_available()``): once loaded."""
    return _library is not None


def device_count() -> int:
    """The number of devices: one."""
    return 1


def current_device() -> int:
    """The index of the current device: 0."""
    return 0


def sleep(ms: int) -> None:
    """Keeps the current stream busy for ``ms`` milliseconds; returns at once."""
    torch.ops.fake_accelerator.sleep(ms)


def synchronize() -> None:
    """Waits until every stream ran all its work; raises what a kernel raised."""
    torch.ops.fake_accelerator.synchronize()


def stats() -> dict[str, int]:
    """The caching allocator's counts: blocks mapped, reused, freed, and frees deferred by ``record_stream``."""
    allocations, reuses, frees, deferred = torch.ops.fake_accelerator.stats()
    return {"allocations": allocations, "reuses": reuses, "frees": frees, "deferred_frees": deferred}


def current_stream() -> torch.Stream:
    """This thread's current stream (the default stream unless set)."""
    return torch.ops.fake_accelerator.current_stream()


def new_stream() -> torch.Stream:
    """A new stream, with a thread of its own."""
    return torch.ops.fake_accelerator.new_stream()


@contextlib.contextmanager
def stream(s: torch.Stream) -> Iterator[torch.Stream]:
    """Makes ``s`` the current stream inside the block."""
    previous = torch.ops.fake_accelerator.set_stream(s)
    try:
        yield s
    finally:
        torch.ops.fake_accelerator.set_stream(previous)


@contextlib.contextmanager
def copy_latency(ms: int) -> Iterator[None]:
    """Host-to-device copies land ``ms`` milliseconds after they are queued, inside the block.

    As a busy copy engine would: what only waits for the host's side of a copy,
    not for the stream it was queued on, then reads the old data.
    """
    previous = torch.ops.fake_accelerator.set_copy_latency(ms)
    try:
        yield
    finally:
        torch.ops.fake_accelerator.set_copy_latency(previous)
