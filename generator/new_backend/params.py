"""click parameter types that parse and validate option values (``convert``/``fail``)."""

from __future__ import annotations

import click

from new_backend.exceptions import InvalidAnswerError
from new_backend.validate import resolve_ops, validate_devices, validate_library, validate_name


class _Checked(click.ParamType):
    """A ParamType whose ``convert`` is one of the validators in :mod:`new_backend.validate`."""

    @staticmethod
    def check(value: str):  # pragma: no cover - overridden
        raise NotImplementedError

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value  # already converted (a default, or a value from --from-answers)
        try:
            return self.check(value)
        except InvalidAnswerError as e:
            self.fail(e.reason, param, ctx)


class BackendName(_Checked):
    """A backend name: lower-case identifier, not a keyword, not a built-in backend."""

    name = "NAME"
    check = staticmethod(validate_name)


class OpList(_Checked):
    """A comma-separated list of ops or aliases, or ``all``; canonical names back."""

    name = "OPS"
    check = staticmethod(resolve_ops)


class DeviceList(_Checked):
    """A comma-separated list of devices (cpu, cuda)."""

    name = "DEVICES"
    check = staticmethod(validate_devices)


class LibraryName(_Checked):
    """The pkg-config name of the library a project builds against (``ucx``)."""

    name = "PKG"
    check = staticmethod(validate_library)


BACKEND_NAME = BackendName()
LIBRARY_NAME = LibraryName()
OP_LIST = OpList()
DEVICE_LIST = DeviceList()
