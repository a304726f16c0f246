"""The check, before the C++ extension loads, that it was built for the torch in use,
and what to say when it does not load.

An extension built against one torch release fails under another with
undefined symbols; this says so in one line instead. setup.py records the
torch of the build in ``_build_info.py``. A library the extension links that
the loader cannot find (moved, removed) is named in one line too, with the way out.
"""

import re

import torch

REBUILD = "pip install --no-build-isolation ."
#: This package, and the backend's name (the package is ``<name>_collectives``).
PACKAGE = __package__
NAME = PACKAGE.removesuffix("_collectives")
#: The prefixes of the settings that point the build at each library the extension
#: links (``FOO`` for ``FOO_HOME``; see setup.py).
LIBRARY_VARIABLES = ["MPI"]


def release(version: str) -> str:
    """``2.13`` for ``2.13.0+cpu``: what the extension's binary compatibility follows."""
    return ".".join(version.split("+")[0].split(".")[:2])


def check_torch() -> None:
    """Raises ImportError, naming both versions, when this build is for another torch release."""
    try:
        from ._build_info import TORCH_VERSION
    except ImportError:
        raise ImportError(
            f"{PACKAGE} is not built: run `{REBUILD}` in its project folder"
        ) from None
    if release(TORCH_VERSION) != release(torch.__version__):
        raise ImportError(
            f"{PACKAGE} was built against torch {TORCH_VERSION} but this is torch {torch.__version__}:"
            f" rebuild it with `{REBUILD}` in its project folder"
        )


def load_error(error: ImportError) -> str:
    """What to say when the extension ``_C`` does not load: the backend, the library the
    loader did not find (``libfoo.so: cannot open shared object file``) and the way out."""
    reason = " ".join(str(error).split())
    missing = re.match(r"([^\s:]+): cannot open shared object file", reason)
    if missing is None:
        return (
            f"the {NAME} backend's extension {PACKAGE}._C does not load ({reason}):"
            f" rebuild it with `{REBUILD}` in its project folder"
        )
    point = ""
    if LIBRARY_VARIABLES:
        homes = " or ".join(f"{v}_HOME" for v in LIBRARY_VARIABLES)
        folders = " and ".join(f"{v}_INCLUDE_DIR and {v}_LIBRARY_DIR" for v in LIBRARY_VARIABLES)
        point = (
            f", pointing the build at the library with {homes}=/its/prefix (or"
            f" {folders}, or PKG_CONFIG_PATH for pkg-config)"
        )
    return (
        f"the {NAME} backend ({PACKAGE}) cannot load {missing[1]}, a library its"
        " extension links, which is not where it was at build time: add its folder to"
        f" LD_LIBRARY_PATH, or rebuild with `{REBUILD}` in its project folder{point}"
    )
