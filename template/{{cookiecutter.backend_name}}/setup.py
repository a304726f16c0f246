{%- set p = project() -%}
"""Builds {{ p.package }}, the "{{ p.name }}" torch.distributed backend.

    pip install --no-build-isolation .

builds against the torch already installed (build isolation would fetch
another torch, and the extension must match the one you run). The extension is
a CUDAExtension when that torch is a CUDA build and the CUDA toolkit is found
(CUDA_HOME, or nvcc on the PATH), or when FORCE_CUDA=1; otherwise a
CppExtension. Whether this machine has a GPU does not matter.
{%- if p.impl == "mpi" %}

MPI comes from MPI_HOME (a folder with include/mpi.h and lib/libmpi.so) when
it is set, else from I_MPI_ROOT (Intel MPI's), else from an mpicc compiler wrapper: MPICC, the one `pip install
mpich` puts beside this Python, or the first mpicc on the PATH (MPICH, Open
MPI, Intel MPI, MVAPICH). The extension remembers where libmpi is (rpath).
{%- endif %}
{%- if p.library %}

The library "{{ p.library }}" comes from, in this order:
  {{ p.library_variable }}_INCLUDE_DIR and {{ p.library_variable }}_LIBRARY_DIR (and {{ p.library_variable }}_LIBS,
      comma-separated names to link, default: pkg-config's, else {{ p.library }});
  {{ p.library_variable }}_HOME, a prefix with include/ and lib/ (or lib64/);
  pkg-config {{ p.library }} (PKG_CONFIG_PATH says where else to look).
The extension remembers where the library is (rpath), so the installed wheel
runs without LD_LIBRARY_PATH.
{%- endif %}
"""

import os
{%- if p.impl in ("mpi", "ucx") or p.library %}
import shlex
{%- endif %}
{%- if p.impl == "mpi" %}
import shutil
{%- endif %}
{%- if p.impl in ("mpi", "ucx") or p.library %}
import subprocess
import sys
{%- endif %}
{%- if p.impl == "mpi" %}
import sysconfig
{%- endif %}
{%- if p.impl == "mpi" or p.library %}
from dataclasses import dataclass, field
{%- endif %}
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = Path(__file__).parent.resolve()
{%- if p.impl == "mpi" %}

NO_MPI = """no MPI library found. Install one, then build again:

    pip install mpich                 # MPICH from the package index, into this environment

or point the build at an MPI installed on this machine:

    MPI_HOME=/opt/mpi pip install --no-build-isolation .    # has include/mpi.h, lib/libmpi.so
    MPICC=/opt/mpi/bin/mpicc pip install --no-build-isolation .

(Debian and Ubuntu: apt install libmpich-dev or libopenmpi-dev; clusters: module load mpi)"""


@dataclass
class Mpi:
    """How to compile and link against one MPI library."""

    source: str
    include_dirs: list = field(default_factory=list)
    library_dirs: list = field(default_factory=list)
    libraries: list = field(default_factory=list)
    compile_args: list = field(default_factory=list)
    link_args: list = field(default_factory=list)


def mpi_from_home(home: Path, variable: str = "MPI_HOME") -> Mpi:
    include = home / "include"
    if not (include / "mpi.h").is_file():
        sys.exit(f"error: {variable}={home} has no include/mpi.h\n\n{NO_MPI}")
    libdirs = (home / "lib64", home / "lib", home / "lib" / "release")  # the last: older Intel MPI
    libdir = next((d for d in libdirs if list(d.glob("libmpi.*"))), None)
    if libdir is None:
        sys.exit(f"error: {variable}={home} has no lib/libmpi.so\n\n{NO_MPI}")
    return Mpi(f"{variable}={home}", [str(include)], [str(libdir)], ["mpi"], [], [f"-Wl,-rpath,{libdir}"])


def mpi_from_wrapper(mpicc: str) -> Mpi | None:
    """The flags an mpicc wrapper adds: `-show` (MPICH and friends) or `--showme` (Open MPI)."""
    for flag in ("-show", "--showme"):
        try:
            done = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=60)
            if "I_MPI_SUBSTITUTE_INSTALLDIR" in done.stdout:
                # Intel MPI's wrapper (pip's impi-devel) needs I_MPI_ROOT, its prefix.
                prefix = str(Path(mpicc).resolve().parent.parent)
                env = dict(os.environ, I_MPI_ROOT=prefix)
                done = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=60, env=env, check=False)
        except OSError:
            return None
        words = shlex.split(done.stdout)
        if done.returncode == 0 and any(w.startswith(("-l", "-L", "-I")) for w in words):
            break
    else:
        return None
    mpi = Mpi(mpicc)
    words = words[1:]  # words[0] is the compiler it wraps
    for i, word in enumerate(words):
        if word == "-Xlinker" and i + 1 < len(words):  # Intel MPI: -Xlinker -rpath -Xlinker DIR
            words[i + 1] = "-Wl," + words[i + 1]
        elif word.startswith("-I"):
            mpi.include_dirs.append(word[2:])
        elif word.startswith("-L"):
            mpi.library_dirs.append(word[2:])
            if not any("rpath" in w for w in words):  # so that the extension finds libmpi
                mpi.link_args.append(f"-Wl,-rpath,{word[2:]}")
        elif word.startswith("-l"):
            mpi.libraries.append(word[2:])
        elif word == "-pthread":
            mpi.compile_args.append(word)
            mpi.link_args.append(word)
        elif word.startswith("-D"):
            mpi.compile_args.append(word)
        elif word.startswith("-"):
            mpi.link_args.append(word)  # -Wl,-rpath and the like
    return mpi


def find_mpi() -> Mpi:
    """MPI_HOME, else the first mpicc that answers; exits with how to get MPI otherwise."""
    if os.environ.get("MPI_HOME"):
        return mpi_from_home(Path(os.environ["MPI_HOME"]))
    if os.environ.get("I_MPI_ROOT") and not os.environ.get("MPICC"):  # Intel MPI's setvars.sh sets it
        return mpi_from_home(Path(os.environ["I_MPI_ROOT"]), "I_MPI_ROOT")
    here = [Path(sys.executable).parent / "mpicc", Path(sysconfig.get_path("scripts")) / "mpicc"]
    candidates = [os.environ.get("MPICC"), *(str(p) for p in here if p.is_file()), shutil.which("mpicc")]
    for mpicc in dict.fromkeys(c for c in candidates if c):
        mpi = mpi_from_wrapper(mpicc)
        if mpi is not None:
            return mpi
    sys.exit(f"error: {NO_MPI}")
{%- elif p.impl == "ucx" %}

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
{%- endif %}


{%- if p.library %}


@dataclass
class Library:
    """How to compile and link against {{ p.library }}."""

    source: str
    include_dirs: list = field(default_factory=list)
    library_dirs: list = field(default_factory=list)
    libraries: list = field(default_factory=list)

    @property
    def link_args(self) -> list:
        """An rpath to each library folder: the installed wheel finds it without LD_LIBRARY_PATH."""
        return [f"-Wl,-rpath,{d}" for d in self.library_dirs]


def pkg_config(*args: str, path: str | None = None) -> list | None:
    """The words `pkg-config {{ p.library }} ARGS` prints, or None when it fails."""
    env = dict(os.environ)
    if path is not None:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(filter(None, [path, env.get("PKG_CONFIG_PATH")]))
    try:
        done = subprocess.run(
            ["pkg-config", *args, "{{ p.library }}"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )
    except OSError:
        return None
    return shlex.split(done.stdout) if done.returncode == 0 else None


def find_library() -> Library:
    """{{ p.library }} from {{ p.library_variable }}_INCLUDE_DIR/_LIBRARY_DIR, {{ p.library_variable }}_HOME or pkg-config; else exits."""
    names = [n for n in os.environ.get("{{ p.library_variable }}_LIBS", "").split(",") if n]
    include, libdir = os.environ.get("{{ p.library_variable }}_INCLUDE_DIR"), os.environ.get("{{ p.library_variable }}_LIBRARY_DIR")
    home = os.environ.get("{{ p.library_variable }}_HOME")
    if include or libdir or home:
        if home:
            include = include or str(Path(home, "include"))
            libdir = libdir or next(
                (str(d) for d in (Path(home, "lib64"), Path(home, "lib")) if d.is_dir()), str(Path(home, "lib"))
            )
        source = "{{ p.library_variable }}_HOME=" + home if home else "{{ p.library_variable }}_INCLUDE_DIR/{{ p.library_variable }}_LIBRARY_DIR"
        for variable, folder in (("include", include), ("library", libdir)):
            if not folder or not Path(folder).is_dir():
                sys.exit(f"error: {{ p.library }}: {source} gives no {variable} folder ({folder})")
        pc = pkg_config("--libs-only-l", path=str(Path(libdir, "pkgconfig")))
        names = names or [w[2:] for w in pc or [] if w.startswith("-l")] or ["{{ p.library }}".removeprefix("lib")]
        return Library(source, [include], [libdir], names)
    cflags, libs = pkg_config("--cflags-only-I"), pkg_config("--libs-only-L", "--libs-only-l")
    if cflags is None or libs is None:
        sys.exit(
            "error: {{ p.library }} not found: no pkg-config package '{{ p.library }}' (PKG_CONFIG_PATH) and no "
            "{{ p.library_variable }}_HOME or {{ p.library_variable }}_INCLUDE_DIR/{{ p.library_variable }}_LIBRARY_DIR; install it (its -dev package) "
            "or set {{ p.library_variable }}_HOME=/its/prefix"
        )
    library_dirs = [w[2:] for w in libs if w.startswith("-L")]
    if not library_dirs:  # a system folder pkg-config leaves out: ask it anyway, for the rpath
        library_dirs = [d for d in [*(pkg_config("--variable=libdir") or [])] if d]
    return Library(
        "pkg-config {{ p.library }}",
        [w[2:] for w in cflags if w.startswith("-I")],
        library_dirs,
        names or [w[2:] for w in libs if w.startswith("-l")],
    )
{%- endif %}


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
{%- if p.impl == "mpi" %}
    mpi = find_mpi()
    print(f"{{ p.package }}: building against the MPI of {mpi.source}")
{%- elif p.impl == "ucx" %}
    ucx = find_ucx()
{%- endif %}
{%- if p.library %}
    library = find_library()
    print(f"{{ p.package }}: building against {{ p.library }} from {library.source}")
{%- endif %}
    return [
        extension(
            name="{{ p.package }}._C",
            sources=sources,
{%- if p.impl == "mpi" and p.library %}
            include_dirs=[str(ROOT / "csrc"), *mpi.include_dirs, *library.include_dirs],
            library_dirs=[*mpi.library_dirs, *library.library_dirs],
            libraries=[*mpi.libraries, *library.libraries],
            extra_link_args=[*mpi.link_args, *library.link_args],
{%- elif p.impl == "mpi" %}
            include_dirs=[str(ROOT / "csrc"), *mpi.include_dirs],
            library_dirs=mpi.library_dirs,
            libraries=mpi.libraries,
            extra_link_args=mpi.link_args,
{%- elif p.impl == "ucx" %}
            include_dirs=[str(ROOT / "csrc"), *ucx["include_dirs"]],
            library_dirs=ucx["library_dirs"],
            libraries=ucx["libraries"],
            extra_link_args=ucx["extra_link_args"],
{%- elif p.library %}
            include_dirs=[str(ROOT / "csrc"), *library.include_dirs],
            library_dirs=library.library_dirs,
            libraries=library.libraries,
            extra_link_args=library.link_args,
{%- else %}
            include_dirs=[str(ROOT / "csrc")],
{%- endif %}
{%- if p.impl == "mpi" %}
            # The C API only: Open MPI's and MPICH's mpi.h otherwise pull in their
            # C++ bindings, which need a library of their own (libmpi_cxx).
            define_macros=[("OMPI_SKIP_MPICXX", "1"), ("MPICH_SKIP_MPICXX", "1")]
            + ([("WITH_CUDA", None)] if with_cuda else []),
{%- else %}
            define_macros=[("WITH_CUDA", None)] if with_cuda else [],
{%- endif %}
            # No debug info (-g0): it triples the compile time of torch's headers.
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"{{ ", *mpi.compile_args" if p.impl == "mpi" }}], "nvcc": ["-O2"]},
        )
    ]


def torch_release() -> str:
    """``2.13`` for torch ``2.13.0+cpu``: the extension only works with that torch release."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


# The package checks at import that it runs with the torch it was built for.
(ROOT / "src" / "{{ p.package }}" / "_build_info.py").write_text(
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
