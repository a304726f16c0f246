"""The mpi project's setup.py finds MPICH, Open MPI and Intel MPI by their own conventions.

Fake ``mpicc`` wrappers print what the real ones print (MPICH's ``-show``, Open
MPI's ``--showme``, the wrapper of pip's impi-devel, which needs I_MPI_ROOT),
and setup.py's functions (not its build) turn that into compile and link
flags. `bash .ci/mpi-libraries` builds against the real libraries.
"""

from __future__ import annotations

import stat
import sys
import types
from pathlib import Path

import pytest
from new_backend import generate_project


@pytest.fixture(scope="module")
def setup_functions(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The rendered mpi project's setup.py, up to its build: find_library and the rest."""
    rendered = generate_project(
        "mpi_all", ops="all", impl="mpi", output_dir=tmp_path_factory.mktemp("r")
    )
    source = (rendered.target / "setup.py").read_text()
    module = types.ModuleType("mpi_all_setup")  # dataclasses look their module up
    module.__file__ = str(rendered.target / "setup.py")
    sys.modules[module.__name__] = module
    try:
        exec(
            compile(source[: source.index("def build_with_cuda")], "setup.py", "exec"),
            module.__dict__,
        )
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def wrapper(folder: Path, script: str) -> str:
    """An executable ``folder/bin/mpicc`` running ``script`` (sh)."""
    path = folder / "bin" / "mpicc"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_mpich_wrapper_answers_show(setup_functions: dict, tmp_path: Path) -> None:
    mpicc = wrapper(
        tmp_path,
        '[ "$1" = -show ] && echo "gcc -I/opt/mpich/include -L/opt/mpich/lib '
        '-Wl,-rpath -Wl,/opt/mpich/lib -Wl,--enable-new-dtags -lmpi"',
    )
    mpi = setup_functions["from_wrapper"](mpicc)
    assert mpi.include_dirs == ["/opt/mpich/include"] and mpi.library_dirs == ["/opt/mpich/lib"]
    assert mpi.libraries == ["mpi"]
    assert mpi.link_args == []  # the wrapper's rpath is dropped: find_library writes its own


def test_open_mpi_wrapper_answers_showme_and_gets_an_rpath(
    setup_functions: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Open MPI's wrapper hands -show to the compiler, which fails.
    mpicc = wrapper(
        tmp_path,
        '[ "$1" = --showme ] || { echo "gcc: error: unrecognized option -show" >&2; exit 1; }\n'
        'echo "gcc -I/usr/lib/openmpi/include -I/usr/lib/openmpi/include/openmpi -pthread '
        '-L/usr/lib/openmpi/lib -lmpi"',
    )
    for variable in ("MPI_HOME", "MPI_INCLUDE_DIR", "MPI_LIBRARY_DIR", "I_MPI_ROOT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MPICC", mpicc)
    (wanted,) = setup_functions["LIBRARIES"]
    mpi = setup_functions["find_library"](wanted)
    assert mpi.source == mpicc
    assert mpi.include_dirs == ["/usr/lib/openmpi/include", "/usr/lib/openmpi/include/openmpi"]
    assert mpi.libraries == ["mpi"] and mpi.compile_args == ["-pthread"]
    assert mpi.link_args == [
        "-pthread",
        "-Wl,--enable-new-dtags",
        "-Wl,-rpath,/usr/lib/openmpi/lib",
    ]


def test_intel_mpi_wrapper_from_pip_gets_its_prefix(setup_functions: dict, tmp_path: Path) -> None:
    """pip's impi-devel: its mpicc prints a placeholder prefix unless I_MPI_ROOT is set;
    its rpath comes as -Xlinker pairs."""
    mpicc = wrapper(
        tmp_path,
        'P="${I_MPI_ROOT:-I_MPI_SUBSTITUTE_INSTALLDIR}"\n'
        'echo "gcc -I\\"$P/include\\" -L\\"$P/lib\\" -Xlinker --enable-new-dtags '
        '-Xlinker -rpath -Xlinker \\"$P/lib\\" -lmpifort -lmpi -lrt -lpthread -Wl,-z,now -ldl"',
    )
    mpi = setup_functions["from_wrapper"](mpicc)
    prefix = str(tmp_path.resolve())
    assert mpi.include_dirs == [f"{prefix}/include"] and mpi.library_dirs == [f"{prefix}/lib"]
    assert "mpi" in mpi.libraries
    assert mpi.link_args == ["-Wl,-z,now"]  # its -Xlinker rpath pairs are dropped, the rest kept


def test_i_mpi_root_is_named_as_the_source(
    setup_functions: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "mpi.h").write_text("")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmpi.so.12").write_text("")
    for variable in ("MPI_HOME", "MPI_INCLUDE_DIR", "MPI_LIBRARY_DIR", "MPICC", "MPI_LIBS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("I_MPI_ROOT", str(tmp_path))
    (wanted,) = setup_functions["LIBRARIES"]
    mpi = setup_functions["find_library"](wanted)
    assert mpi.source == f"I_MPI_ROOT={tmp_path}"
    assert mpi.library_dirs == [str(tmp_path / "lib")] and mpi.link_args == [
        "-Wl,--enable-new-dtags",
        f"-Wl,-rpath,{(tmp_path / 'lib').resolve()}",
    ]
