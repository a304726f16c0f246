"""The check, before the C++ extension loads, that it was built for the torch in use.

An extension built against one torch release fails under another with
undefined symbols; this says so in one line instead. setup.py records the
torch of the build in ``_build_info.py``.
"""

import torch

REBUILD = "pip install --no-build-isolation ."


def release(version: str) -> str:
    """``2.13`` for ``2.13.0+cpu``: what the extension's binary compatibility follows."""
    return ".".join(version.split("+")[0].split(".")[:2])


def check_torch() -> None:
    """Raises ImportError, naming both versions, when this build is for another torch release."""
    try:
        from ._build_info import TORCH_VERSION
    except ImportError:
        raise ImportError(
            f"ucx_all_collectives is not built: run `{REBUILD}` in its project folder"
        ) from None
    if release(TORCH_VERSION) != release(torch.__version__):
        raise ImportError(
            f"ucx_all_collectives was built against torch {TORCH_VERSION} but this is torch {torch.__version__}:"
            f" rebuild it with `{REBUILD}` in its project folder"
        )
