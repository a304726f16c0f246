"""new-backend: generate complete, buildable PyTorch ``torch.distributed`` backends.

The one entry point is :func:`generate_project`; the ``new-backend`` command, the
tests and the README all go through it.
"""

__version__ = "0.2.7"

from new_backend.generate import GenerationResult, generate_project

__all__ = ["GenerationResult", "__version__", "generate_project"]
