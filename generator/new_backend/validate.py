"""Validation of everything a user can ask for, before a single byte is written.

Each function takes the user's raw value and returns the canonical one, or
raises :class:`~new_backend.exceptions.InvalidAnswerError` with a message that says
what is wrong and what would be right. The CLI's click types, the cookiecutter
pre-generation hook and :func:`~new_backend.generate.generate_project` all call
these functions, so every route into the template checks the same rules.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import asdict, dataclass

from new_backend.catalogue import load_catalogue
from new_backend.exceptions import InvalidAnswerError

MAX_NAME_LENGTH = 32
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")

# Names torch.distributed already gives a meaning to: its built-in backends and
# the names well-known out-of-tree backends register.
RESERVED_BACKEND_NAMES = frozenset(
    {
        "undefined", "gloo", "nccl", "ucc", "mpi", "xccl", "fake", "threaded", "custom",
        "ccl", "hccl", "cncl", "mccl", "xla", "nvshmem", "ncclx", "torchcomms", "smddp",
    }
)  # fmt: skip

CPP_KEYWORDS = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "and_eq",
        "asm",
        "auto",
        "bitand",
        "bitor",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char8_t",
        "char16_t",
        "char32_t",
        "class",
        "compl",
        "concept",
        "const",
        "consteval",
        "constexpr",
        "constinit",
        "const_cast",
        "continue",
        "co_await",
        "co_return",
        "co_yield",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "not_eq",
        "nullptr",
        "operator",
        "or",
        "or_eq",
        "private",
        "protected",
        "public",
        "register",
        "reinterpret_cast",
        "requires",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
        "xor",
        "xor_eq",
        "final",
        "override",
        "import",
        "module",
    ]
)

#: torch's own device types a generated backend serves: its runtime meets their
#: streams through c10's device-generic Stream, Event and DeviceGuardImpl.
DEVICES = ("cpu", "cuda", "xpu", "hpu", "mtia", "mps")
DEFAULT_DEVICES = ("cpu", "cuda")
#: Names that are not a device a backend can be registered for, and what to say instead.
NOT_DEVICES = {
    "gpu": "torch calls NVIDIA and AMD GPUs cuda",
    "meta": "meta tensors hold no data to communicate",
    "privateuseone": "name the out-of-tree device as its package renames PrivateUse1 (npu, say)",
    "privateuse1": "torch names the PrivateUse1 device privateuseone until its package renames "
    "it; name the device as the package does (npu, say)",
    **{
        name: "it is one of torch's own device types, which generated backends do not serve"
        for name in ("xla", "lazy", "ipu", "ve", "vulkan", "metal", "mkldnn", "opengl",
                     "opencl", "ideep", "hip", "fpga", "maia")
    },
}  # fmt: skip
#: An out-of-tree (PrivateUse1) device's name, as torch.utils.rename_privateuse1_backend takes it.
DEVICE_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
#: Device types, torch's and those well-known out-of-tree packages register: no backend's name.
DEVICE_NAMES = frozenset(DEVICES) | frozenset(NOT_DEVICES) | {"npu", "musa", "gcu", "mlu", "sdaa"}
#: torch's own names, whose upper-case prefix (TORCH_*) torch's environment variables use.
TORCH_NAMES = frozenset({"torch", "pytorch", "c10", "c10d", "aten", "caffe2", "distributed"})
IMPLEMENTATIONS = ("dummy", "store", "mpi", "ucx")
DEFAULT_NAME = "dummy"
DEFAULT_OPS = ("allreduce", "allgather")


def validate_name(name: str) -> str:
    """Check a backend name: a lower-case identifier usable in C++, Python and c10d."""
    if not isinstance(name, str):
        raise InvalidAnswerError("backend name", f"expected a string, got {name!r}")
    if not name:
        raise InvalidAnswerError("backend name", "it is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidAnswerError(
            "backend name", f"{name[:40]!r}... is {len(name)} characters; at most {MAX_NAME_LENGTH}"
        )
    if "/" in name or "\\" in name or name in (".", ".."):
        raise InvalidAnswerError(
            "backend name", f"{name!r} is a path; give a plain name such as 'mybackend'"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidAnswerError(
            "backend name",
            f"{name!r} must be lower-case letters, digits and single underscores, "
            "starting with a letter (e.g. 'mybackend' or 'my_rdma')",
        )
    if keyword.iskeyword(name):
        raise InvalidAnswerError("backend name", f"{name!r} is a Python keyword")
    if name in CPP_KEYWORDS:
        raise InvalidAnswerError("backend name", f"{name!r} is a C++ keyword")
    if name in RESERVED_BACKEND_NAMES:
        raise InvalidAnswerError(
            "backend name", f"{name!r} is already a torch.distributed backend name; pick another"
        )
    if name in DEVICE_NAMES:
        raise InvalidAnswerError(
            "backend name",
            f"{name!r} is a device type: torch.distributed reads '{name}:...' in a backend "
            "string such as 'cpu:gloo,cuda:nccl' as a device; pick another",
        )
    if name in TORCH_NAMES:
        raise InvalidAnswerError(
            "backend name",
            f"{name!r} is one of torch's own names: the backend's options would be read from "
            f"{name.upper()}_* environment variables, which are torch's; pick another",
        )
    return name


def _items(field: str, value: object) -> list[str]:
    """A comma-separated string or a list of strings, as a list of stripped strings."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",")]
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value]
    raise InvalidAnswerError(
        field, f"expected a comma-separated string or a list of names, got {value!r}"
    )


def resolve_ops(ops: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Turn ``"all_reduce,allgather"`` (or a list) into canonical op names, catalogue order.

    ``"all"`` selects every op. Unknown names get close-match suggestions.
    """
    catalogue = load_catalogue()
    items = _items("ops", ops)
    if not any(items):
        raise InvalidAnswerError(
            "ops", "the list is empty; try --ops allreduce,allgather or --ops all"
        )
    if "" in items:
        raise InvalidAnswerError("ops", f"{','.join(items)!r} has an empty entry")
    if [i.lower() for i in items] == ["all"]:
        return catalogue.names
    if "all" in (i.lower() for i in items):
        raise InvalidAnswerError(
            "ops", f"{','.join(items)!r}: 'all' already selects every op; give it alone"
        )
    chosen: dict[str, str] = {}
    for item in items:
        op = catalogue.get(item)
        if op is None:
            hint = catalogue.suggest(item)
            extra = f"; did you mean {' or '.join(hint)}?" if hint else ""
            raise InvalidAnswerError(
                "ops", f"unknown op {item!r}{extra} (new-backend --list-ops lists them all)"
            )
        if op.name in chosen:
            same = "" if chosen[op.name] == item else f" (as {chosen[op.name]!r})"
            raise InvalidAnswerError("ops", f"{item!r} is listed twice{same}")
        chosen[op.name] = item
    return tuple(op.name for op in catalogue.ordered(list(chosen)))


def validate_devices(devices: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Check a device list such as ``"cpu,cuda"``; returns it in canonical order.

    Besides torch's own :data:`DEVICES`, one out-of-tree accelerator may be named
    (``cpu,npu``): the PrivateUse1 device its package registers; it comes last.
    """
    items = [item.lower() for item in _items("devices", devices)]
    if not any(items) or "" in items:
        raise InvalidAnswerError("devices", "the list is empty or has an empty entry; try cpu,cuda")
    for item in items:
        if item in NOT_DEVICES:
            raise InvalidAnswerError(
                "devices", f"{item!r} is not a device to serve: {NOT_DEVICES[item]}"
            )
        if item not in DEVICES and not DEVICE_PATTERN.fullmatch(item):
            raise InvalidAnswerError(
                "devices",
                f"{item!r} is not a device name; choose from {', '.join(DEVICES)}, or name an "
                "out-of-tree device as it registers itself (lower case, like npu)",
            )
        typo = next((device for device in DEVICES if _mistyped(item, device)), None)
        if item not in DEVICES and typo is not None:
            raise InvalidAnswerError(
                "devices",
                f"{item!r} is not a device torch knows; did you mean {typo}? (An out-of-tree "
                "device is named as its package renames PrivateUse1, like npu.)",
            )
    if len(set(items)) != len(items):
        raise InvalidAnswerError("devices", f"{','.join(items)!r} lists a device twice")
    private = [item for item in items if item not in DEVICES]
    if len(private) > 1:
        raise InvalidAnswerError(
            "devices",
            f"{' and '.join(private)} are both out-of-tree devices; torch has one such device "
            "type (PrivateUse1) per process",
        )
    return tuple(d for d in DEVICES if d in items) + tuple(private)


def _mistyped(name: str, device: str) -> bool:
    """Whether ``name`` is ``device`` with two letters swapped, or one letter more or less.

    Not one letter changed: npu, hpu and xpu are all real devices.
    """
    if len(name) == len(device):
        diffs = [i for i, (a, b) in enumerate(zip(name, device, strict=True)) if a != b]
        return len(diffs) == 2 and diffs[1] == diffs[0] + 1 and sorted(name) == sorted(device)
    longer, shorter = (name, device) if len(name) > len(device) else (device, name)
    if len(longer) != len(shorter) + 1 or len(shorter) < 3:
        return False
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def validate_impl(impl: str) -> str:
    """Check the implementation kind (``dummy``...)."""
    if not isinstance(impl, str) or impl not in IMPLEMENTATIONS:
        raise InvalidAnswerError(
            "implementation", f"unknown --impl {impl!r}; choose from {', '.join(IMPLEMENTATIONS)}"
        )
    return impl


_PKG_CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def validate_library(library: str) -> str:
    """Check ``--library``: the pkg-config name of the library to link (``ucx``), or ''."""
    if not isinstance(library, str):
        raise InvalidAnswerError("library", "--library must be a string")
    if library and not _PKG_CONFIG_NAME.fullmatch(library):
        raise InvalidAnswerError(
            "library",
            f"{library!r} is not a pkg-config package name (letters, digits and . _ + -, "
            "e.g. ucx or libfabric)",
        )
    return library


@dataclass(frozen=True)
class Answers:
    """Everything that decides what a generated project contains."""

    backend_name: str = DEFAULT_NAME
    ops: tuple[str, ...] = DEFAULT_OPS
    devices: tuple[str, ...] = DEFAULT_DEVICES
    impl: str = "dummy"
    #: The pkg-config name of the library the project builds against ('' for none).
    library: str = ""

    @classmethod
    def checked(
        cls,
        backend_name: str = DEFAULT_NAME,
        ops: str | list[str] | tuple[str, ...] = DEFAULT_OPS,
        devices: str | list[str] | tuple[str, ...] = DEFAULT_DEVICES,
        impl: str = "dummy",
        library: str = "",
    ) -> Answers:
        """Validate raw values and return canonical answers."""
        return cls(
            backend_name=validate_name(backend_name),
            ops=resolve_ops(ops),
            devices=validate_devices(devices),
            impl=validate_impl(impl),
            library=validate_library(library),
        )

    def cookiecutter_context(self) -> dict[str, str]:
        """The answers as cookiecutter's extra_context (lists as comma-separated strings)."""
        data = asdict(self)
        if not data["library"]:
            del data["library"]  # as templates from before --library expect
        return {k: ",".join(v) if isinstance(v, tuple) else v for k, v in data.items()}


def change_ops(
    current: tuple[str, ...], spec: str, notes: list[str] | None = None
) -> tuple[str, ...]:
    """Apply ``--ops`` of ``new-backend update`` to a project's ops.

    ``"+broadcast,+reduce_scatter"`` adds ops, ``"-allgather"`` removes one
    (signs can be mixed); a list without signs is the whole list, as in
    ``new-backend --ops``, and must keep every op the project has: an op is
    dropped by ``-op``, never by leaving it out. Adding an op the project
    has, or removing one it lacks, changes nothing and says so in ``notes``
    (when given). Returns
    canonical names in catalogue order.
    """
    items = _items("ops", spec)
    signed = [item for item in items if item[:1] in ("+", "-")]
    if not signed:
        ops = resolve_ops(spec)
        dropped = [name for name in current if name not in ops]
        if dropped:
            adding = ",".join(f"+{name}" for name in ops if name not in current)
            raise InvalidAnswerError(
                "ops",
                f"{spec!r} would drop {', '.join(dropped)}, which the project has: to add ops, "
                f"sign them ({adding or '+op'}); to drop one, say so "
                f"({','.join('-' + name for name in dropped)})",
            )
        return ops
    if len(signed) != len(items):
        raise InvalidAnswerError(
            "ops", f"{spec!r} mixes +op/-op changes with plain names; sign every op or none"
        )
    ops = list(current)
    for item in items:
        (name,) = resolve_ops(item[1:])
        if item[0] == "+" and name in ops:
            _note(notes, f"{item}: the project already has {name}; nothing to add")
        elif item[0] == "-" and name not in ops:
            _note(notes, f"{item}: the project does not have {name}; nothing to remove")
        elif item[0] == "+":
            ops.append(name)
        else:
            ops.remove(name)
    return resolve_ops(ops)


def _note(notes: list[str] | None, note: str) -> None:
    if notes is not None:
        notes.append(note)
