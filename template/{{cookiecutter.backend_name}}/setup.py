{%- set p = project() -%}
"""Builds the C++ extension of this torch.distributed backend (its package: pyproject.toml).

    pip install --no-build-isolation .

builds against the torch already installed (build isolation would fetch
another torch, and the extension must match the one you run). The extension is
a CUDAExtension when that torch is a CUDA build and the CUDA toolkit is found
(CUDA_HOME, or nvcc on the PATH), or when FORCE_CUDA=1; otherwise a
CppExtension. Whether this machine has a GPU does not matter.
{%- for library in p.libraries %}

{% if library.mpi -%}
MPI (library "mpi") comes from, in this order:
{%- else -%}
The library "{{ library.name }}" comes from, in this order:
{%- endif %}
  {{ library.variable }}_INCLUDE_DIR and {{ library.variable }}_LIBRARY_DIR (and {{ library.variable }}_LIBS,
      comma-separated names to link, default: pkg-config's, else {{ library.default_libraries | join(",") }});
  {{ library.variable }}_HOME, a prefix with include/ and lib/ (or lib64/);
{%- if library.mpi %}
  I_MPI_ROOT (Intel MPI's setvars.sh sets it), unless MPICC is set;
  the flags of an mpicc wrapper (`mpicc -show`, Open MPI's `--showme`): MPICC, else
      the one `pip install mpich` puts beside this Python, else the first on the PATH;
{%- endif %}
  pkg-config {{ library.name }} (PKG_CONFIG_PATH says where else to look).
{%- endfor %}
{%- if p.libraries %}
The extension remembers where each library is (rpath): relative to itself
($ORIGIN) when the library belongs to this Python environment (a pip wheel such
as mpich's, a venv or conda prefix), so the environment may move; by its
absolute folder too. The installed wheel runs without LD_LIBRARY_PATH.
{%- endif %}
"""

import os
import re
{%- if p.libraries %}
import shlex
{%- endif %}
{%- if p.mpi_library %}
import shutil
{%- endif %}
{%- if p.libraries %}
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
{%- endif %}
from pathlib import Path

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = Path(__file__).parent.resolve()
#: The Python package the extension goes in: the first of pyproject.toml's [tool.setuptools]
#: packages (the distribution's name may change: publishing under another name moves nothing).
PACKAGE = re.search(r'^packages = \["([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]
{%- if p.libraries %}


@dataclass(frozen=True)
class Wanted:
    """A library to build against, and how to recognise it."""

    name: str  # its pkg-config name
    variable: str  # the prefix of its settings: {VARIABLE}_HOME, _INCLUDE_DIR, _LIBRARY_DIR, _LIBS
    header: str  # a header its include folder must hold ("" for none)
    libraries: list  # what to link when neither {VARIABLE}_LIBS nor pkg-config says
    install: str  # how to get it, for the error when it is missing
    extra: tuple = ()  # its own conventions: (what, function(wanted) -> Library or None), tried before pkg-config


@dataclass
class Library:
    """How to compile and link against one library, and where that came from."""

    source: str
    include_dirs: list = field(default_factory=list)
    library_dirs: list = field(default_factory=list)
    libraries: list = field(default_factory=list)
    compile_args: list = field(default_factory=list)
    link_args: list = field(default_factory=list)


def in_this_environment(folder: Path) -> bool:
    """Whether ``folder`` belongs to this Python environment: its site-packages (a library's own
    pip wheel), or the prefix of a venv or conda environment (pip's mpich puts libmpi in PREFIX/lib)."""
    roots = [sysconfig.get_path("platlib"), sysconfig.get_path("purelib")]
    if sys.prefix != sys.base_prefix or os.environ.get("CONDA_PREFIX") == sys.prefix:
        roots.append(sys.prefix)
    return any(folder.is_relative_to(Path(root).resolve()) for root in roots)


def rpath(folder: str) -> list:
    """Linker flags so that the extension finds the libraries in ``folder`` without LD_LIBRARY_PATH.

    A folder of this Python environment is named relative to where pip installs the extension
    (``$ORIGIN/../../..`` from site-packages/<package>/), so the environment can move or be
    copied; the absolute folder follows, for builds used in place (``build_ext --inplace``,
    ``pip install --target``). Any other folder (/usr, /opt, a module's prefix) is absolute.
    """
    folder = Path(folder).resolve()
    paths = [str(folder)]
    if in_this_environment(folder):
        installed = Path(sysconfig.get_path("platlib"), PACKAGE).resolve()
        paths.insert(0, "$ORIGIN/" + os.path.relpath(folder, installed))
    # RUNPATH (new dtags), which LD_LIBRARY_PATH can still override, as mpicc and torch do.
    return ["-Wl,--enable-new-dtags", *(f"-Wl,-rpath,{path}" for path in paths)]


def pkg_config(name: str, *args: str, path: str | None = None) -> list | None:
    """The words `pkg-config ARGS NAME` prints, or None when it fails."""
    env = dict(os.environ)
    if path is not None:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(filter(None, [path, env.get("PKG_CONFIG_PATH")]))
    try:
        done = subprocess.run(
            ["pkg-config", *args, name], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return shlex.split(done.stdout) if done.returncode == 0 else None


def link_names(wanted: Wanted, libdir: str | None = None, pc: list | None = None) -> list:
    """{VARIABLE}_LIBS, else what pkg-config (also in LIBDIR/pkgconfig) links, else the default.

    ``pc``: pkg-config's words when the caller has them already.
    """
    names = [n for n in os.environ.get(f"{wanted.variable}_LIBS", "").split(",") if n]
    if not names and pc is None:
        pc = pkg_config(wanted.name, "--libs-only-l", path=str(Path(libdir, "pkgconfig")) if libdir else None)
    return names or [w[2:] for w in pc or [] if w.startswith("-l")] or list(wanted.libraries)


def from_folders(wanted: Wanted, source: str, include: str, libdir: str) -> Library:
    """The library in an include folder and a library folder a setting names; exits if it is not there."""
    for what, folder in (("include", include), ("library", libdir)):
        if not folder or not Path(folder).is_dir():
            sys.exit(f"error: {wanted.name}: {source} gives no {what} folder ({folder})")
    if wanted.header and not Path(include, wanted.header).is_file():
        sys.exit(f"error: {wanted.name}: {source} has no {wanted.header} in {include}")
    names = link_names(wanted, libdir)
    if not list(Path(libdir).glob(f"lib{names[0]}.*")):
        sys.exit(f"error: {wanted.name}: {source} has no lib{names[0]}.so in {libdir}")
    return Library(source, [include], [libdir], names)


def from_home(wanted: Wanted, source: str, home: str) -> Library:
    """The library under a prefix: HOME/include, and HOME/lib64, lib or lib/release (older Intel MPI)."""
    names = link_names(wanted)
    folders = [Path(home, "lib64"), Path(home, "lib"), Path(home, "lib", "release")]
    libdir = next((d for d in folders if list(d.glob(f"lib{names[0]}.*"))), None)
    libdir = libdir or next((d for d in folders if d.is_dir()), folders[1])
    return from_folders(wanted, source, str(Path(home, "include")), str(libdir))


def from_pkg_config(wanted: Wanted) -> Library | None:
    cflags = pkg_config(wanted.name, "--cflags-only-I")
    libs = pkg_config(wanted.name, "--libs-only-L", "--libs-only-l")
    if cflags is None or libs is None:
        return None
    library_dirs = [w[2:] for w in libs if w.startswith("-L")]
    if not library_dirs:  # a system folder pkg-config leaves out: ask for it anyway, for the rpath
        library_dirs = pkg_config(wanted.name, "--variable=libdir") or []
    return Library(
        f"pkg-config {wanted.name}",
        [w[2:] for w in cflags if w.startswith("-I")],
        library_dirs,
        link_names(wanted, pc=libs),
    )
{%- if p.mpi_library %}


def intel_mpi(wanted: Wanted) -> Library | None:
    """Intel MPI's I_MPI_ROOT (its setvars.sh sets it), unless MPICC chooses another MPI."""
    root = os.environ.get("I_MPI_ROOT")
    return from_home(wanted, f"I_MPI_ROOT={root}", root) if root and not os.environ.get("MPICC") else None


def from_wrapper(mpicc: str) -> Library | None:
    """The flags an mpicc wrapper adds: `-show` (MPICH and friends) or `--showme` (Open MPI)."""
    for flag in ("-show", "--showme"):
        try:
            done = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=60, check=False)
            if "I_MPI_SUBSTITUTE_INSTALLDIR" in done.stdout:
                # Intel MPI's wrapper (pip's impi-devel) needs I_MPI_ROOT, its prefix.
                env = dict(os.environ, I_MPI_ROOT=str(Path(mpicc).resolve().parent.parent))
                done = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=60, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        words = shlex.split(done.stdout)
        if done.returncode == 0 and any(w.startswith(("-l", "-L", "-I")) for w in words):
            break
    else:
        return None
    library = Library(mpicc)
    words = iter(words[1:])  # the first word is the compiler it wraps
    for word in words:
        if word.startswith("-I"):
            library.include_dirs.append(word[2:])
        elif word.startswith("-L"):
            library.library_dirs.append(word[2:])
        elif word.startswith("-l"):
            library.libraries.append(word[2:])
        elif word == "-pthread":
            library.compile_args.append(word)
            library.link_args.append(word)
        elif word.startswith("-D"):
            library.compile_args.append(word)
        elif word == "-Xlinker":  # Intel MPI: -Xlinker --enable-new-dtags -Xlinker -rpath -Xlinker DIR
            arg = next(words, "")
            if arg == "-rpath":  # the wrapper's rpath: rpath() writes ours
                next(words, None), next(words, None)
            elif arg and not arg.endswith("-new-dtags"):
                library.link_args.append(f"-Wl,{arg}")
        elif word == "-Wl,-rpath":  # the wrapper's rpath: rpath() writes ours
            next(words, None)
        elif word.startswith(("-Wl,-rpath", "-Wl,--enable-new-dtags", "-Wl,--disable-new-dtags")):
            pass
        elif word.startswith("-"):
            library.link_args.append(word)
    return library


def mpicc_wrapper(wanted: Wanted) -> Library | None:
    """The first mpicc that answers: MPICC, the one pip's mpich puts beside this Python, the PATH's."""
    here = [Path(sys.executable).parent / "mpicc", Path(sysconfig.get_path("scripts")) / "mpicc"]
    candidates = [os.environ.get("MPICC"), *(str(p) for p in here if p.is_file()), shutil.which("mpicc")]
    for mpicc in dict.fromkeys(c for c in candidates if c):
        library = from_wrapper(mpicc)
        if library is not None:
            return library
    return None
{%- endif %}


def find_library(wanted: Wanted) -> Library:
    """The library from its settings, its own conventions, then pkg-config; else exits in one line."""
    v = wanted.variable
    include, libdir = os.environ.get(f"{v}_INCLUDE_DIR"), os.environ.get(f"{v}_LIBRARY_DIR")
    home = os.environ.get(f"{v}_HOME")
    if include or libdir:
        found = from_folders(wanted, f"{v}_INCLUDE_DIR/{v}_LIBRARY_DIR", include or "", libdir or "")
    elif home:
        found = from_home(wanted, f"{v}_HOME={home}", home)
    else:
        found = next((f for _, find in wanted.extra if (f := find(wanted)) is not None), None)
        found = found or from_pkg_config(wanted)
    if found is None:
        looked = ", ".join([f"{v}_INCLUDE_DIR/{v}_LIBRARY_DIR", f"{v}_HOME", *(what for what, _ in wanted.extra)])
        sys.exit(
            f"error: {wanted.name} not found: looked for {looked} and pkg-config {wanted.name} "
            f"(PKG_CONFIG_PATH); {wanted.install}, or set {v}_HOME=/its/prefix"
        )
    for folder in found.library_dirs:
        found.link_args += [arg for arg in rpath(folder) if arg not in found.link_args]
    return found


LIBRARIES = [
{%- for library in p.libraries %}
    Wanted(
        "{{ library.name }}",
        "{{ library.variable }}",
        header="{{ library.header }}",
        libraries={{ library.default_libraries | list | tojson }},
        install="{{ library.install }}",
{%- if library.mpi %}
        extra=(("I_MPI_ROOT", intel_mpi), ("an mpicc (MPICC, beside this Python, on the PATH)", mpicc_wrapper)),
{%- endif %}
    ),
{%- endfor %}
]
{%- endif %}


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
{%- if p.libraries %}
    found = [find_library(wanted) for wanted in LIBRARIES]
    for wanted, library in zip(LIBRARIES, found):
        print(f"{PACKAGE}: building against {wanted.name} from {library.source}")
    compile_args = [arg for library in found for arg in library.compile_args]
{%- endif %}
    return [
        extension(
            name=f"{PACKAGE}._C",
            sources=sources,
{%- if p.libraries %}
            include_dirs=[str(ROOT / "csrc"), *(d for library in found for d in library.include_dirs)],
            library_dirs=[d for library in found for d in library.library_dirs],
            libraries=[name for library in found for name in library.libraries],
            extra_link_args=list(dict.fromkeys(arg for library in found for arg in library.link_args)),
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
            extra_compile_args={"cxx": ["-O2", "-g0", "-fvisibility=hidden"{{ ", *compile_args" if p.libraries }}], "nvcc": ["-O2"]},
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
