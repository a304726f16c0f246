"""What the template needs to know about one project: names derived from the answers.

The cookiecutter extension (template/local_extensions.py) builds a
:class:`Project` from the cookiecutter context, so plain ``cookiecutter
template/`` renders exactly what ``new-backend`` renders.
"""

from __future__ import annotations

from dataclasses import dataclass

from new_backend import __version__
from new_backend.catalogue import Op, load_catalogue
from new_backend.validate import DEVICES, Answers


@dataclass(frozen=True)
class Library:
    """A library the generated ``setup.py`` finds, compiles against and links.

    Every library is found the same way (``find_library()`` in ``setup.py``):
    ``VARIABLE_INCLUDE_DIR``/``VARIABLE_LIBRARY_DIR``, else ``VARIABLE_HOME``,
    else the library's own conventions (``mpi``: ``I_MPI_ROOT`` and ``mpicc``
    wrappers), else ``pkg-config NAME``.
    """

    #: Its pkg-config name (``ucx``).
    name: str
    #: A header its include folder must hold (``ucp/api/ucp.h``); '' to check none.
    header: str = ""
    #: What to link when neither ``VARIABLE_LIBS`` nor pkg-config says.
    libraries: tuple[str, ...] = ()
    #: How to install it, for the one-line error when it is missing.
    install: str = "install it (its -dev package)"
    #: Whether MPI's conventions apply: ``I_MPI_ROOT``, ``mpicc -show`` (``MPICC``, pip's mpich).
    mpi: bool = False

    @property
    def variable(self) -> str:
        """The prefix of its build variables (``UCX`` for ``UCX_HOME``)."""
        return "".join(c if c.isalnum() else "_" for c in self.name).upper()

    @property
    def default_libraries(self) -> tuple[str, ...]:
        return self.libraries or (self.name.removeprefix("lib"),)


#: What setup.py knows about the libraries of the implementations (and of ``--library``
#: with those names); any other ``--library`` gets the defaults.
KNOWN_LIBRARIES = {
    "mpi": Library(
        "mpi", header="mpi.h", libraries=("mpi",), install="pip install mpich", mpi=True
    ),
    "ucx": Library(
        "ucx",
        header="ucp/api/ucp.h",
        libraries=("ucp", "uct", "ucs"),
        install="apt-get install libucx-dev",
    ),
}

#: The library each implementation is written against.
IMPL_LIBRARY = {"mpi": "mpi", "ucx": "ucx"}


@dataclass(frozen=True)
class Project:
    """A validated set of answers plus every name the template derives from them."""

    answers: Answers

    @classmethod
    def from_context(cls, context: dict) -> Project:
        """Build from cookiecutter's context (comma-separated strings)."""
        return cls(
            Answers.checked(
                backend_name=context["backend_name"],
                ops=context["ops"],
                devices=context["devices"],
                impl=context["impl"],
                library=context.get("library", ""),
            )
        )

    @property
    def name(self) -> str:
        """The backend name given to ``init_process_group`` (``dummy``)."""
        return self.answers.backend_name

    @property
    def camel(self) -> str:
        """The C++ class suffix: ``my_rdma`` becomes ``MyRdma``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def package(self) -> str:
        """The Python package and C++ namespace (``dummy_collectives``)."""
        return f"{self.name}_collectives"

    @property
    def distribution(self) -> str:
        """The pip distribution name (``dummy-collectives``)."""
        return f"{self.name.replace('_', '-')}-collectives"

    @property
    def backend_class(self) -> str:
        return f"Backend{self.camel}"

    @property
    def work_class(self) -> str:
        return f"Work{self.camel}"

    @property
    def macro(self) -> str:
        """Prefix for this project's preprocessor macros (``DUMMY``)."""
        return self.name.upper()

    @property
    def ops(self) -> tuple[Op, ...]:
        return load_catalogue().ordered(self.answers.ops)

    @property
    def op_names(self) -> tuple[str, ...]:
        return self.answers.ops

    @property
    def missing_ops(self) -> tuple[Op, ...]:
        """Catalogue ops this project does not implement."""
        return tuple(op for op in load_catalogue().ops if op.name not in self.answers.ops)

    @property
    def devices(self) -> tuple[str, ...]:
        return self.answers.devices

    @property
    def torch_devices(self) -> tuple[str, ...]:
        """The devices of torch's own this project serves (cpu, cuda...)."""
        return tuple(d for d in self.answers.devices if d in DEVICES)

    @property
    def private_device(self) -> str | None:
        """The out-of-tree (PrivateUse1) device this project serves, by name, if any."""
        return next((d for d in self.answers.devices if d not in DEVICES), None)

    @property
    def impl(self) -> str:
        return self.answers.impl

    @property
    def library(self) -> str:
        """The pkg-config name of the library the project builds against ('' for none)."""
        return self.answers.library

    @property
    def libraries(self) -> tuple[Library, ...]:
        """Every library setup.py links: the implementation's (``--impl ucx`` is library
        ``ucx``), then ``--library``'s, once each."""
        names = dict.fromkeys(n for n in (IMPL_LIBRARY.get(self.impl, ""), self.library) if n)
        return tuple(KNOWN_LIBRARIES.get(name, Library(name)) for name in names)

    @property
    def user_library(self) -> Library | None:
        """The library ``--library`` names, if any."""
        return KNOWN_LIBRARIES.get(self.library, Library(self.library)) if self.library else None

    @property
    def extra_library(self) -> Library | None:
        """``--library``'s library unless it is the implementation's own (its docs cover it)."""
        if self.library == IMPL_LIBRARY.get(self.impl):
            return None
        return self.user_library

    @property
    def mpi_library(self) -> bool:
        """Whether setup.py needs MPI's own ways of finding a library (mpicc and friends)."""
        return any(library.mpi for library in self.libraries)

    @property
    def generator_version(self) -> str:
        return __version__

    def has(self, op_name: str) -> bool:
        """Whether the project implements the op called ``op_name``."""
        return op_name in self.answers.ops
