"""Reads the flight recorder's dumps of every rank with torch's analyser, on every torch.

    python -m <package>.frtrace DIR [the analyser's options]

Each rank of a group whose collective timed out writes its record to
``TORCH_FR_DUMP_TEMP_FILE<rank>`` in c10d's format. Torch's analyser
(``python -m torch.distributed.flight_recorder.fr_trace DIR``) reads them from
torch 2.15 on; older ones read only the backends they know by name (NCCL's,
gloo's and a few others) and refuse this one. So this copies the dumps
with the backend's ops named as gloo's, runs the analyser on the copies, and
names this backend again in what it prints. It exits with the analyser's code.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import torch

from . import BACKEND_NAME as BACKEND

#: The name the analyser knows that stands for this backend's while it reads the copies.
STAND_IN = "gloo"


def reads_any_backend() -> bool:
    """Whether the installed torch's analyser reads the dumps of any backend (torch 2.15 on)."""
    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 15)


def copy_dumps(folder: str, into: str) -> int:
    """Copies every dump in ``folder`` to ``into``, this backend's ops named as STAND_IN's.

    Returns how many it copied; files that are not dumps stay behind.
    """
    copied = 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                dump = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError):
            continue
        if not isinstance(dump, dict) or "entries" not in dump:
            continue
        for entry in dump["entries"]:
            backend, _, op = entry.get("profiling_name", "").partition(":")
            if backend == BACKEND:
                entry["profiling_name"] = f"{STAND_IN}:{op}"
        with open(os.path.join(into, name), "wb") as f:
            pickle.dump(dump, f)
        copied += 1
    return copied


def main(argv: list[str] | None = None) -> int:
    """Runs torch's analyser on the dumps in the folder ``argv[0]``; returns its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    folder, options = argv[0], argv[1:]
    analyser = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    if reads_any_backend():
        return subprocess.run([*analyser, folder, *options], check=False).returncode
    with tempfile.TemporaryDirectory(prefix=f"{BACKEND}-frtrace-") as copies:
        if copy_dumps(folder, copies) == 0:
            print(f"{BACKEND}: no flight recorder dumps in {folder}", file=sys.stderr)
            return 1
        done = subprocess.run(
            [*analyser, copies, *options], capture_output=True, text=True, check=False
        )
    sys.stdout.write(done.stdout.replace(f"{STAND_IN}:", f"{BACKEND}:"))
    sys.stderr.write(done.stderr.replace(f"{STAND_IN}:", f"{BACKEND}:"))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
