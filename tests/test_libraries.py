"""The generated setup.py finds and links every library one way, the implementation's and
--library's.

No extension is built here. A rendered ``setup.py`` runs for real (its
``find_library()`` calls pkg-config, mpicc and the file system) with only
setuptools' ``setup()`` swapped for a recorder of the extension it is given;
then a tiny shared object is linked with exactly the flags setup.py chose, its
``NEEDED`` and ``RUNPATH`` are read back, and it is loaded in a fresh process
without ``LD_LIBRARY_PATH``. ``foo`` is a real one-function library compiled
by the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import ucx_by_pkg_config
from new_backend import generate_project

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

#: Runs setup.py in its folder and prints, as JSON, the settings of the extension it builds.
RECORD = """
import json, runpy, setuptools
seen = {}
setuptools.setup = lambda **kw: seen.update(kw)
runpy.run_path("setup.py", run_name="__main__")
ext = seen["ext_modules"][0]
print(json.dumps({k: getattr(ext, k) for k in
      ("include_dirs", "library_dirs", "libraries", "extra_link_args")}))
"""

#: What torch's CppExtension links on its own.
TORCH_LIBRARIES = {"c10", "torch", "torch_cpu", "torch_python"}

#: Per implementation: a header of its library, a call into it, and the soname it links.
IMPL_LIBRARIES = {
    "ucx": ("ucp/api/ucp.h", "unsigned a, b, c; ucp_get_version(&a, &b, &c);", "libucp.so"),
    "mpi": ("mpi.h", "int done; MPI_Initialized(&done);", "libmpi.so"),
}


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without LD_LIBRARY_PATH nor any library setting of setup.py's."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k != "LD_LIBRARY_PATH"
        and not k.startswith(("FOO_", "UCX_", "MPI_"))
        and k not in ("MPICC", "I_MPI_ROOT")
    }
    return keep | extra


def record(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RECORD],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def foo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prefix with include/foo.h and lib/libfoo.so: a real library, in no standard place."""
    prefix = tmp_path_factory.mktemp("foo-prefix")
    (prefix / "include").mkdir()
    (prefix / "lib").mkdir()
    (prefix / "include" / "foo.h").write_text("int foo_answer(void);\n")
    source = prefix / "foo.c"
    source.write_text("int foo_answer(void) { return 42; }\n")
    subprocess.run(
        [CC, "-shared", "-fPIC", str(source), "-o", str(prefix / "lib" / "libfoo.so")], check=True
    )
    return prefix


@pytest.mark.parametrize("impl", sorted(IMPL_LIBRARIES))
def test_impl_library_and_user_library_are_both_linked(
    impl: str, foo: Path, tmp_path: Path
) -> None:
    """--impl ucx|mpi --library foo: setup.py finds and links both; both load by RUNPATH."""
    if impl == "ucx" and not ucx_by_pkg_config():
        pytest.skip("no UCX: apt-get install libucx-dev")
    header, call, soname = IMPL_LIBRARIES[impl]
    project = generate_project(
        "both", ops="allreduce", impl=impl, library="foo", output_dir=tmp_path / "render"
    ).target
    answers = json.loads((project / ".new-backend.json").read_text())
    assert (answers["impl"], answers["library"]) == (impl, "foo")

    done = record(project, clean_env(FOO_HOME=str(foo)))
    assert done.returncode == 0, done.stdout + done.stderr
    ext = json.loads(done.stdout.splitlines()[-1])
    assert f"both_collectives: building against foo from FOO_HOME={foo}" in done.stdout
    assert f"both_collectives: building against {impl} from " in done.stdout
    libraries = [name for name in ext["libraries"] if name not in TORCH_LIBRARIES]
    assert "foo" in libraries and ("ucp" if impl == "ucx" else "mpi") in libraries, libraries
    assert str(foo / "include") in ext["include_dirs"]
    # foo is outside this Python environment: an absolute rpath, never $ORIGIN.
    assert f"-Wl,-rpath,{foo / 'lib'}" in ext["extra_link_args"]
    assert not any("$ORIGIN" in arg and "foo" in arg for arg in ext["extra_link_args"])

    # Link a shared object that calls into both, with setup.py's flags and nothing else.
    probe = tmp_path / "probe.c"
    probe.write_text(
        f"#include <foo.h>\n#include <{header}>\n"
        f"int probe(void) {{ {call} return foo_answer(); }}\n"
    )
    shared = tmp_path / "probe.so"
    subprocess.run(
        [
            CC, "-shared", "-fPIC", "-Wl,--no-as-needed", str(probe), "-o", str(shared),
            *(f"-I{d}" for d in ext["include_dirs"]),
            *(f"-L{d}" for d in ext["library_dirs"]),
            *(f"-l{name}" for name in libraries),
            *ext["extra_link_args"],
        ],
        check=True,
    )  # fmt: skip
    dynamic = subprocess.run(
        ["readelf", "-d", str(shared)], capture_output=True, text=True, check=True
    ).stdout
    assert "[libfoo.so]" in dynamic and f"[{soname}" in dynamic, dynamic
    assert "(RUNPATH)" in dynamic and str(foo / "lib") in dynamic, dynamic
    # Loads, both libraries found through the RUNPATH alone.
    load = f"import ctypes; print(ctypes.CDLL({str(shared)!r}).probe())"
    done = subprocess.run(
        [sys.executable, "-c", load], env=clean_env(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stdout + done.stderr


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The one line setup.py exits with; nothing else on stderr says error."""
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1 and lines[0] == done.stderr.strip().splitlines()[-1], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_missing_library_is_one_line(tmp_path: Path) -> None:
    """Without foo, setup.py says in one line what it looked for and how to point at it."""
    project = generate_project("lonely", library="foo", output_dir=tmp_path).target
    line = one_error_line(record(project, clean_env()))
    assert line == (
        "error: foo not found: looked for FOO_INCLUDE_DIR/FOO_LIBRARY_DIR, FOO_HOME and "
        "pkg-config foo (PKG_CONFIG_PATH); install it (its -dev package), or set "
        "FOO_HOME=/its/prefix"
    )
    # A setting that names the wrong place says what is not there.
    line = one_error_line(record(project, clean_env(FOO_HOME=str(tmp_path))))
    assert line.startswith(f"error: foo: FOO_HOME={tmp_path} ") and "include" in line


def test_missing_ucx_says_how_to_install_it(tmp_path: Path) -> None:
    """--impl ucx is library ucx: with no ucx.pc reachable, apt-get or UCX_HOME."""
    project = generate_project("noucx", impl="ucx", output_dir=tmp_path / "render").target
    nowhere = tmp_path / "no-pkgconfig"
    nowhere.mkdir()
    line = one_error_line(record(project, clean_env(PKG_CONFIG_LIBDIR=str(nowhere))))
    assert line.startswith("error: ucx not found: looked for UCX_INCLUDE_DIR/UCX_LIBRARY_DIR")
    assert "apt-get install libucx-dev" in line and "UCX_HOME" in line
    # UCX_HOME pointing at a prefix that is not UCX's: its header is missing.
    other = tmp_path / "other"
    (other / "include").mkdir(parents=True)
    (other / "lib").mkdir()
    line = one_error_line(record(project, clean_env(UCX_HOME=str(other))))
    assert line == f"error: ucx: UCX_HOME={other} has no ucp/api/ucp.h in {other / 'include'}"


def test_impl_library_given_again_is_linked_once(tmp_path: Path) -> None:
    """--impl ucx --library ucx is one library, found once; the answers keep what was asked."""
    project = generate_project(
        "twice", impl="ucx", library="ucx", output_dir=tmp_path / "render"
    ).target
    setup = (project / "setup.py").read_text()
    assert setup.count("    Wanted(\n") == 1 and 'Wanted(\n        "ucx",' in setup
    answers = json.loads((project / ".new-backend.json").read_text())
    assert (answers["impl"], answers["library"]) == ("ucx", "ucx")
    plain = generate_project("plain", impl="ucx", output_dir=tmp_path / "plain").target
    assert "library" not in json.loads((plain / ".new-backend.json").read_text())
    assert (plain / "setup.py").read_text().replace("plain", "twice") == setup


#: Imports the package in a fresh process and prints the ImportError it raises, if any.
IMPORT = """
try:
    import lonely_collectives
except ImportError as e:
    print(f"{type(e).__name__}: {e}")
"""


def test_a_missing_library_at_run_time_names_it_and_the_way_out(foo: Path, tmp_path: Path) -> None:
    """An extension whose libfoo.so is gone: one line naming the backend, libfoo.so, and
    LD_LIBRARY_PATH, the rebuild and FOO_HOME; not the loader's bare message."""
    import torch

    project = generate_project("lonely", library="foo", output_dir=tmp_path).target
    package = project / "src" / "lonely_collectives"
    (package / "_build_info.py").write_text(f'TORCH_VERSION = "{torch.__version__}"\n')
    # The extension as the loader sees it: a shared object that needs libfoo.so.
    source = tmp_path / "c.c"
    source.write_text("int foo_answer(void);\nint lonely(void) { return foo_answer(); }\n")
    extension = package / f"_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        [CC, "-shared", "-fPIC", str(source), "-Wl,--no-as-needed", f"-L{foo / 'lib'}", "-lfoo",
         "-o", str(extension)],
        check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", IMPORT],
        env=clean_env(PYTHONPATH=str(project / "src")),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    line = lines[0]
    assert line.startswith(
        "ImportError: the lonely backend (lonely_collectives) cannot load libfoo.so"
    )
    for hint in (
        "LD_LIBRARY_PATH",
        "pip install --no-build-isolation .",
        "FOO_HOME",
        "FOO_INCLUDE_DIR",
    ):
        assert hint in line, line
    assert "<NAME>" not in line, line
    # Found where the build left it, it loads (up to the missing module init).
    done = subprocess.run(
        [sys.executable, "-c", IMPORT],
        env=clean_env(PYTHONPATH=str(project / "src"), LD_LIBRARY_PATH=str(foo / "lib")),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "cannot load libfoo.so" not in done.stdout
    assert "lonely backend's extension lonely_collectives._C does not load" in done.stdout
