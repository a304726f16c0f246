"""The catalogue of collectives: ``catalogue.toml`` loaded into read-only records.

Every part of new-backend that needs to know about ops (the CLI, the template,
the tests) asks this module; nothing else lists them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import tomllib

CATALOGUE_FILE = Path(__file__).with_name("catalogue.toml")


@dataclass(frozen=True)
class Rename:
    """A name that changed in a later torch release."""

    torch: str
    name: str

    @property
    def torch_version(self) -> tuple[int, int]:
        """The release as a ``(major, minor)`` tuple."""
        return release(self.torch)


@dataclass(frozen=True)
class Op:
    """One overridable collective of ``c10d::Backend``. See catalogue.toml for the fields."""

    name: str
    summary: str
    op_type: str
    python: str
    params: str
    timeout: str
    checks: str
    outputs: str
    body: str
    args: str
    returns: str
    dummy: str
    test: str
    writes: tuple[str, ...]
    test_in_place: str = ""
    store: str = ""
    mpi: str = ""
    ucx: str = ""
    inputs: str = ""
    since: str | None = None
    queue: str = "ops"
    aliases: tuple[str, ...] = ()
    renamed: Rename | None = None
    op_type_renamed: Rename | None = None

    def params_wrapped(self, indent: str = "    ", width: int = 100) -> str:
        """The C++ parameters, packed onto lines of at most ``width`` columns."""
        lines = [""]
        for param in self.params.split(", "):
            joined = f"{lines[-1]}, {param}" if lines[-1] else param
            if lines[-1] and len(indent) + len(joined) + 3 > width:
                lines[-1] += ","
                lines.append(param)
            else:
                lines[-1] = joined
        return ("\n" + indent).join(lines)

    def body_for(self, impl: str) -> str:
        """The C++ body of this op in ops.cpp for an implementation (dummy, store, mpi, ucx)."""
        return getattr(self, impl)

    @property
    def python_params(self) -> tuple[str, ...]:
        """The parameters of the ``python`` call: ``("tensor_list", "tensor")``."""
        inside = self.python[self.python.index("(") + 1 : self.python.index(")")]
        return tuple(p.split("=")[0].strip() for p in inside.split(",") if p.strip())

    @property
    def written_positions(self) -> tuple[int, ...]:
        """Where in the ``python`` call the arguments the op writes are (``writes``)."""
        return tuple(self.python_params.index(name) for name in self.writes)

    @property
    def on_receive_queue(self) -> bool:
        """Whether the op runs on the backend's receive thread (see ``queue``)."""
        return self.queue == "receives"

    @property
    def on_caller_thread(self) -> bool:
        """Whether the op runs on the caller's thread (a send: see ``queue``)."""
        return self.queue == "caller"

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every name this op answers to: its own and its aliases."""
        return (self.name, *self.aliases)

    @property
    def canonical_names(self) -> tuple[str, ...]:
        """The c10d method names, old first: ``("_allgather_base", "all_gather_single")``."""
        return (self.name, self.renamed.name) if self.renamed else (self.name,)


@dataclass(frozen=True)
class Catalogue:
    """All ops, in ``Backend.hpp`` order, with lookup by name or alias."""

    ops: tuple[Op, ...]
    #: Backend.hpp collectives left out on purpose, with the reason.
    not_supported: dict[str, str] = field(default_factory=dict)
    #: Other virtual methods ("Backend::name", "Work::name") c10d's defaults serve, and why.
    defaults: dict[str, str] = field(default_factory=dict)
    _index: dict[str, Op] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for op in self.ops:
            for spelling in op.spellings:
                key = _normalise(spelling)
                other = self._index.setdefault(key, op)
                if other is not op:
                    raise ValueError(
                        f"catalogue: {spelling!r} names both {other.name} and {op.name}"
                    )

    @property
    def names(self) -> tuple[str, ...]:
        """The op ids, in catalogue order."""
        return tuple(op.name for op in self.ops)

    def get(self, spelling: str) -> Op | None:
        """The op that ``spelling`` (a name or alias, any case) means, or None."""
        return self._index.get(_normalise(spelling))

    def __getitem__(self, name: str) -> Op:
        op = self.get(name)
        if op is None:
            raise KeyError(name)
        return op

    def suggest(self, spelling: str) -> list[str]:
        """Close matches for an unknown spelling, best first."""
        matches = difflib.get_close_matches(_normalise(spelling), self._index, n=3, cutoff=0.6)
        return list(dict.fromkeys(self._index[m].name for m in matches))

    def ordered(self, names: list[str] | tuple[str, ...]) -> tuple[Op, ...]:
        """The ops called ``names``, in catalogue order."""
        wanted = {self[n].name for n in names}
        return tuple(op for op in self.ops if op.name in wanted)


def release(version: str) -> tuple[int, int]:
    """``"2.14.1+cu130"`` as ``(2, 14)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _normalise(spelling: str) -> str:
    return spelling.strip().lower().replace("-", "_")


def _rename(raw: dict | None) -> Rename | None:
    return Rename(torch=raw["torch"], name=raw["name"]) if raw else None


@cache
def load_catalogue(path: Path = CATALOGUE_FILE) -> Catalogue:
    """Read the catalogue file (once per process)."""
    with path.open("rb") as f:
        raw = tomllib.load(f)
    ops = []
    for entry in raw["op"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        entry["writes"] = tuple(entry["writes"])
        entry["renamed"] = _rename(entry.get("renamed"))
        entry["op_type_renamed"] = _rename(entry.get("op_type_renamed"))
        entry = {k: v.strip("\n") if isinstance(v, str) else v for k, v in entry.items()}
        if entry.get("queue", "ops") not in ("ops", "receives", "caller"):
            raise ValueError(
                f'catalogue: {entry["name"]}: queue must be "ops", "receives" or "caller"'
            )
        op = Op(**entry)
        if unknown := sorted(set(op.writes) - set(op.python_params)):
            raise ValueError(
                f"catalogue: {op.name}: writes {unknown}, not parameters of {op.python}"
            )
        ops.append(op)
    return Catalogue(tuple(ops), dict(raw.get("not_supported", {})), dict(raw.get("defaults", {})))
