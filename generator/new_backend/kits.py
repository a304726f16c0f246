"""Template kits: the template plus the generator code it renders with, keyed by content hash.

``new-backend update`` needs the *base*: what the generator that made a project
rendered from its answers. A project's ``.new-backend.json`` records the
generator version and the hash of its kit (:func:`kit_hash`); this module finds
the kit with that hash and renders it, offline:

- the installed generator's own kit, when the hash is the installed one's;
- otherwise one of the released kits shipped inside the package, in
  ``new_backend/kits/<version>-<hash>.tar.xz``: the ``template/`` folder and the
  generator's top-level modules of that release (about 70 KB each). An old kit
  renders in a subprocess with its own ``new_backend`` first on ``PYTHONPATH``,
  so it renders byte for byte what that release rendered.

Projects made before hashes were recorded (0.1.0) are found by their version.
``python -m new_backend.kits`` freezes the current kit; run it when releasing.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from new_backend.exceptions import BaseUnavailableError, TemplateError

PACKAGE_DIR = Path(__file__).resolve().parent
KITS_DIR = PACKAGE_DIR / "kits"

#: The generator files that decide what a template renders (besides the template itself).
RENDER_MODULES = ("__init__.py", "catalogue.py", "catalogue.toml", "project.py", "validate.py")

_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def _template_files(template: Path) -> list[Path]:
    return sorted(
        p
        for p in template.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def kit_hash(template: str | os.PathLike[str], package: str | os.PathLike[str]) -> str:
    """The content hash of a template and the generator modules it renders with (16 hex digits).

    The same bytes give the same hash wherever they are installed (a checkout,
    a wheel, a clone made by cruft).
    """
    template, package = Path(template), Path(package)
    digest = hashlib.sha256()
    entries = [
        (f"template/{p.relative_to(template).as_posix()}", p) for p in _template_files(template)
    ]
    entries += [(f"new_backend/{name}", package / name) for name in RENDER_MODULES]
    for name, path in entries:
        content = path.read_bytes() if path.is_file() else b""
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:16]


def package_version(package: Path) -> str:
    """The ``__version__`` a generator package declares, read without importing it."""
    match = _VERSION.search((package / "__init__.py").read_text(encoding="utf-8"))
    return match.group(1) if match else "unknown"


@dataclass(frozen=True)
class Kit:
    """A template and the generator package it renders with (``None``: the running one).

    The installed kit renders in this process. Any other renders in a
    subprocess that imports its own package first: a process imports the
    template's ``local_extensions`` once, so two templates cannot share one.
    """

    template: Path
    package: Path | None = None

    @property
    def hash(self) -> str:
        """The kit's content hash, as recorded in ``.new-backend.json``."""
        return kit_hash(self.template, self.package or PACKAGE_DIR)

    @property
    def version(self) -> str:
        """The generator version of the kit."""
        return package_version(self.package or PACKAGE_DIR)

    @property
    def label(self) -> str:
        """``new-backend 0.1.0 (template 1a2b3c4d)``, for messages and conflict markers."""
        return f"new-backend {self.version} (template {self.hash[:8]})"

    def render(self, context: dict[str, str], dest: Path) -> Path:
        """Render the project for cookiecutter ``context`` into ``dest``; the project folder."""
        from new_backend.generate import render_template, template_dir

        if self.package is None and self.template.resolve() == template_dir().resolve():
            return render_template(self.template, context, dest)
        return _render_in_subprocess(self, context, dest)


def installed_kit() -> Kit:
    """The kit of the running generator."""
    from new_backend.generate import template_dir

    return Kit(template_dir())


def shipped_kits() -> dict[str, tuple[str, Path]]:
    """The released kits in the package: hash -> (version, archive)."""
    found = {}
    for archive in sorted(KITS_DIR.glob("*-*.tar.xz")):
        version, _, digest = archive.name.removesuffix(".tar.xz").rpartition("-")
        found[digest] = (version, archive)
    return found


@contextlib.contextmanager
def base_kit(version: str | None, digest: str | None, also: Kit | None = None) -> Iterator[Kit]:
    """The kit that made a project (by its recorded hash, or by version for 0.1.0 projects).

    Yields the installed kit (or ``also``, when its hash is the one), or an
    extracted shipped one (removed afterwards). Raises
    :class:`BaseUnavailableError` when none has it.
    """
    installed = installed_kit()
    for candidate in (installed, also):
        if candidate is not None and digest is not None and digest == candidate.hash:
            yield candidate
            return
    shipped = shipped_kits()
    archive = None
    if digest is not None and digest in shipped:
        archive = shipped[digest][1]
    elif digest is None:
        by_version = [a for v, a in shipped.values() if v == version]
        archive = by_version[-1] if by_version else None
    if archive is None:
        known = ", ".join(f"{v} ({d[:8]})" for d, (v, _) in shipped.items()) or "none"
        raise BaseUnavailableError(
            f"cannot rebuild the base of this project: it was made by new-backend {version} "
            f"(template {(digest or 'unrecorded')[:8]}), which is neither installed "
            f"({installed.version}, {installed.hash[:8]}) nor among the released templates "
            f"shipped with it ({known}); run the update with that version of new-backend"
        )
    with tempfile.TemporaryDirectory(prefix="new-backend-kit-") as scratch:
        with tarfile.open(archive, "r:xz") as tar:
            _extract(tar, Path(scratch))
        yield Kit(Path(scratch, "template"), Path(scratch, "generator", "new_backend"))


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    for member in tar.getmembers():
        name = Path(member.name)
        if not member.isfile() or name.is_absolute() or ".." in name.parts:
            raise TemplateError(f"unexpected entry {member.name!r} in a shipped template kit")
    if sys.version_info >= (3, 12):
        tar.extractall(dest, filter="data")
    else:  # checked above: regular files inside dest only
        tar.extractall(dest)


_DRIVER = r"""
import json, sys, tempfile
from pathlib import Path
from cookiecutter.main import cookiecutter
template, context, dest, home = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
config = Path(home, "config.yaml")
config.write_text(
    f"cookiecutters_dir: {json.dumps(str(Path(home, 'cookiecutters')))}\n"
    f"replay_dir: {json.dumps(str(Path(home, 'replay')))}\n"
)
tempfile.tempdir = home
print(cookiecutter(template, no_input=True, extra_context=context, output_dir=dest,
                   config_file=str(config)))
"""


def _render_in_subprocess(kit: Kit, context: dict[str, str], dest: Path) -> Path:
    package = kit.package or PACKAGE_DIR
    with tempfile.TemporaryDirectory(prefix="new-backend-kit-render-") as home:
        env = dict(os.environ)
        paths = [str(package.parent), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["TMPDIR"] = home
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _DRIVER,
                str(kit.template),
                json.dumps(context),
                str(dest),
                home,
            ],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TemplateError(f"rendering the base with {kit.label} failed: {last}")
    return Path(done.stdout.strip().splitlines()[-1])


def freeze(
    template: Path | None = None, package: Path | None = None, dest: Path = KITS_DIR
) -> Path:
    """Write ``<version>-<hash>.tar.xz`` of a kit into ``dest`` (reproducible bytes); its path."""
    kit = Kit(template or installed_kit().template, package or PACKAGE_DIR)
    archive = dest / f"{kit.version}-{kit.hash}.tar.xz"
    files = [
        (f"template/{p.relative_to(kit.template).as_posix()}", p)
        for p in _template_files(kit.template)
    ]
    files += [
        (f"generator/new_backend/{p.name}", p)
        for p in sorted((package or PACKAGE_DIR).iterdir())
        if p.is_file() and p.suffix in (".py", ".toml")
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", format=tarfile.PAX_FORMAT) as tar:
        for name, path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    dest.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(buffer.getvalue())
    return archive


if __name__ == "__main__":
    print(freeze())
