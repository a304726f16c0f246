"""new-backend: generate complete, buildable PyTorch ``torch.distributed`` backends.

The one entry point is :func:`generate_project`; the ``new-backend`` command, the
tests and the README all go through it. It is imported on first use, so that
the command (:mod:`new_backend.command`) starts without the template engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

if TYPE_CHECKING:
    from new_backend.generate import GenerationResult, generate_project

__all__ = ["GenerationResult", "__version__", "generate_project"]


def __getattr__(name: str) -> Any:
    if name in ("GenerationResult", "generate_project"):
        from new_backend import generate

        return getattr(generate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
