"""Builds the C++ extension of this torch.distributed backend (its package: pyproject.toml).

    pip install --no-build-isolation .

builds against the torch already installed (build isolation would fetch
another torch, and the extension must match the one you run). The extension is
a CUDAExtension when that torch is a CUDA build and the CUDA toolkit is found
(CUDA_HOME, or nvcc on the PATH), or when FORCE_CUDA=1; otherwise a
CppExtension. Whether this machine has a GPU does not matter.
"""

import os
import re
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = Path(__file__).parent.resolve()
#: The Python package the extension goes in: the first of pyproject.toml's [tool.setuptools]
#: packages (the distribution's name may change: publishing under another name moves nothing).
PACKAGE = re.search(r'^packages = \["([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]


def build_with_cuda() -> bool:
    """CUDA support follows the torch being built against, never the GPU present."""
    if os.environ.get("FORCE_CUDA", "0") == "1":
        return True
    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def get_extensions():
    with_cuda = build_with_cuda()
    # Your sources (csrc/*.cpp) and the runtime's two translation units (csrc/runtime/runtime.cpp
    # includes the rest); the runtime's take longest, so they start first.
    runtime = ["csrc/runtime/runtime.cpp", "csrc/runtime/bindings.cpp"]
    sources = runtime + sorted(str(path.relative_to(ROOT)) for path in (ROOT / "csrc").glob("*.cpp"))
    extension = cpp_extension.CUDAExtension if with_cuda else cpp_extension.CppExtension
    return [
        extension(
            name=f"{PACKAGE}._C",
            sources=sources,
            include_dirs=[str(ROOT / "csrc")],
            define_macros=[("WITH_CUDA", None)] if with_cuda else [],
            # No debug info (-g0): it triples the compile time of torch's headers.
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"], "nvcc": ["-O2"]},
        )
    ]


def torch_release() -> str:
    """``2.13`` for torch ``2.13.0+cpu``: the extension only works with that torch release."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


# The package checks at import that it runs with the torch it was built for.
(ROOT / "src" / PACKAGE / "_build_info.py").write_text(
    f'"""Written by setup.py: the torch this build is for."""\n\nTORCH_VERSION = "{torch.__version__}"\n'
)

# ninja compiles the sources in parallel; more jobs than cores only slows
# each of them down.
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
os.environ.setdefault("MAX_JOBS", str(cores or 1))

setup(
    install_requires=[f"torch=={torch_release()}.*"],
    ext_modules=get_extensions(),
    cmdclass={"build_ext": cpp_extension.BuildExtension},
)
