"""Builds ucx_all_collectives, the "ucx_all" torch.distributed backend.

    pip install --no-build-isolation .

builds against the torch already installed (build isolation would fetch
another torch, and the extension must match the one you run). The extension is
a CUDAExtension when that torch is a CUDA build and the CUDA toolkit is found
(CUDA_HOME, or nvcc on the PATH), or when FORCE_CUDA=1; otherwise a
CppExtension. Whether this machine has a GPU does not matter.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = Path(__file__).parent.resolve()

NO_UCX = "error: UCX not found: apt-get install libucx-dev (or set UCX_HOME to a UCX installation)"


def find_ucx() -> dict:
    """Compiler and linker settings for UCX: UCX_HOME, else pkg-config; exits with how to get it."""
    home = os.environ.get("UCX_HOME")
    if home:
        include = Path(home) / "include"
        libdir = next((d for d in (Path(home) / "lib64", Path(home) / "lib") if list(d.glob("libucp.*"))), None)
        if not (include / "ucp" / "api" / "ucp.h").is_file() or libdir is None:
            sys.exit(f"error: UCX_HOME={home} has no include/ucp/api/ucp.h and lib/libucp.so")
        return dict(
            include_dirs=[str(include)],
            library_dirs=[str(libdir)],
            libraries=["ucp", "uct", "ucs"],
            extra_link_args=[f"-Wl,-rpath,{libdir}"],
        )
    try:
        done = subprocess.run(["pkg-config", "--cflags", "--libs", "ucx"], capture_output=True, text=True)
    except OSError:
        sys.exit(NO_UCX)
    if done.returncode != 0:
        sys.exit(NO_UCX)
    words = shlex.split(done.stdout)
    return dict(
        include_dirs=[w[2:] for w in words if w.startswith("-I")],
        library_dirs=[w[2:] for w in words if w.startswith("-L")],
        libraries=[w[2:] for w in words if w.startswith("-l")],
        extra_link_args=[f"-Wl,-rpath,{w[2:]}" for w in words if w.startswith("-L")],
    )


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
    ucx = find_ucx()
    return [
        extension(
            name="ucx_all_collectives._C",
            sources=sources,
            include_dirs=[str(ROOT / "csrc"), *ucx["include_dirs"]],
            library_dirs=ucx["library_dirs"],
            libraries=ucx["libraries"],
            extra_link_args=ucx["extra_link_args"],
            define_macros=[("WITH_CUDA", None)] if with_cuda else [],
            # No debug info (-g0): it triples the compile time of torch's headers.
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"], "nvcc": ["-O2"]},
        )
    ]


def torch_release() -> str:
    """``2.13`` for torch ``2.13.0+cpu``: the extension only works with that torch release."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


# The package checks at import that it runs with the torch it was built for.
(ROOT / "src" / "ucx_all_collectives" / "_build_info.py").write_text(
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
