"""Builds my_rdma2_collectives, the "my_rdma2" torch.distributed backend.

    pip install --no-build-isolation .

builds against the torch already installed (build isolation would fetch
another torch, and the extension must match the one you run). The extension is
a CUDAExtension when that torch is a CUDA build and the CUDA toolkit is found
(CUDA_HOME, or nvcc on the PATH), or when FORCE_CUDA=1; otherwise a
CppExtension. Whether this machine has a GPU does not matter.
"""

import os
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = Path(__file__).parent.resolve()


def build_with_cuda() -> bool:
    """CUDA support follows the torch being built against, never the GPU present."""
    if os.environ.get("FORCE_CUDA", "0") == "1":
        return True
    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def get_extensions():
    with_cuda = build_with_cuda()
    # bindings.cpp (pybind11) takes longest: start it first.
    sources = sorted(
        (str(path.relative_to(ROOT)) for path in (ROOT / "csrc").glob("*.cpp")),
        key=lambda source: (not source.endswith("bindings.cpp"), source),
    )
    extension = cpp_extension.CUDAExtension if with_cuda else cpp_extension.CppExtension
    return [
        extension(
            name="my_rdma2_collectives._C",
            sources=sources,
            include_dirs=[str(ROOT / "csrc")],
            define_macros=[("WITH_CUDA", None)] if with_cuda else [],
            # No debug info (-g0): it triples the compile time of torch's headers.
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"], "nvcc": ["-O2"]},
        )
    ]


# ninja compiles the sources in parallel; more jobs than cores only slows
# each of them down.
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
os.environ.setdefault("MAX_JOBS", str(cores or 1))

setup(
    ext_modules=get_extensions(),
    cmdclass={"build_ext": cpp_extension.BuildExtension},
)
