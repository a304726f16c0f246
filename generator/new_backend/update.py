"""Bring a generated project up to the installed generator, keeping the user's edits.

:func:`update_project` merges three versions of every file the template renders,
as copier and cruft do:

- *base*: what the generator that made the project rendered from its answers
  (rebuilt offline from the kit its ``.new-backend.json`` records, see
  :mod:`new_backend.kits`);
- *theirs*: what the installed generator renders from the same answers, or
  from new ones (``--ops +broadcast``, ``--impl``, ``--devices``);
- *ours*: the project as it is on disk.

A file only the template changed takes the template's version, a file only
the user changed stays as it is, and a file both changed is merged line by line
(:func:`new_backend.merge.merge3`), with conflict markers where the changes
overlap. Only paths the template renders are ever read or written: the user's
own files, ``.git`` and build outputs are never touched.

:func:`check_project` says, for CI, whether a project lags the installed
generator and which of its plumbing files were edited by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from new_backend.exceptions import (
    AnswersFileError,
    BaseUnavailableError,
    DirtyProjectError,
    NotAProjectError,
)
from new_backend.generate import ANSWERS_FILE, enclosing_project, read_answers
from new_backend.kits import Kit, base_kit, installed_kit
from new_backend.merge import merge3, unified_diff
from new_backend.validate import Answers, change_ops, validate_devices, validate_impl

#: Files that are the user's to edit (the op bodies, their Options and Communicator, the
#: docs); every other rendered file is plumbing. ``check`` accepts edits to these.
USER_FILES = ("csrc/ops.cpp", "csrc/ops.hpp", "README.md")


@dataclass(frozen=True)
class Record:
    """What a project's ``.new-backend.json`` says: its answers and the kit that made it."""

    answers: Answers
    generator_version: str | None
    template_hash: str | None


def read_record(project: str | os.PathLike[str]) -> Record:
    """Read ``project/.new-backend.json``; :class:`NotAProjectError` if it has none."""
    project = Path(project)
    path = project / ANSWERS_FILE
    if not path.is_file():
        enclosing = enclosing_project(project)
        raise NotAProjectError(
            f"{project} is not a project made by new-backend (it has no {ANSWERS_FILE})"
            + (
                f"; it is inside the project {enclosing}: run the command there"
                if enclosing
                else ""
            )
        )
    answers = read_answers(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    try:
        checked = Answers.checked(**answers)
    except Exception as e:
        raise AnswersFileError(f"{path}: {e}") from None
    version, digest = data.get("generator_version"), data.get("template_hash")
    return Record(
        checked,
        version if isinstance(version, str) else None,
        digest if isinstance(digest, str) else None,
    )


@dataclass(frozen=True)
class FileUpdate:
    """What update does to one file.

    ``action`` is ``added``, ``updated`` (only the template changed it),
    ``merged`` (both changed it, cleanly), ``removed`` or ``conflict``.
    ``after`` is the new content, ``None`` to delete the file; for a conflict
    that cannot be written as markers it equals ``before``.
    """

    path: str
    action: str
    before: bytes | None
    after: bytes | None
    note: str = ""


@dataclass(frozen=True)
class UpdateResult:
    """What :func:`update_project` did (or, for a dry run, would do)."""

    project: Path
    old: Answers
    new: Answers
    base: str
    theirs: str
    changes: tuple[FileUpdate, ...]
    dry_run: bool = False
    #: What the answers asked for that changed nothing (``+op`` the project has).
    notes: tuple[str, ...] = ()

    @property
    def conflicts(self) -> tuple[FileUpdate, ...]:
        """The files left with conflict markers (or left alone) that need the user."""
        return tuple(c for c in self.changes if c.action == "conflict")

    @property
    def diff(self) -> str:
        """The unified diff of the project before and after the update."""
        return "".join(
            unified_diff(c.path, c.before, c.after) for c in self.changes if c.before != c.after
        )


def update_project(
    project: str | os.PathLike[str] = ".",
    ops: str | None = None,
    devices: str | None = None,
    impl: str | None = None,
    dry_run: bool = False,
    allow_dirty: bool = False,
    kit: Kit | None = None,
    engine: str = "auto",
) -> UpdateResult:
    """Merge the installed template (``kit``: another one) into ``project``, in place.

    ``ops`` (``"+broadcast,-allgather"`` or a plain list), ``devices`` and
    ``impl`` change the answers. Refuses a git project with uncommitted
    changes unless ``allow_dirty``. Conflicts are written as markers and
    reported in the result; nothing is written on a dry run.
    """
    project = Path(project)
    record = read_record(project)
    old = record.answers
    notes: list[str] = []
    new = Answers.checked(
        old.backend_name,
        change_ops(old.ops, ops, notes) if ops is not None else old.ops,
        validate_devices(devices) if devices is not None else old.devices,
        validate_impl(impl) if impl is not None else old.impl,
        old.library,
    )
    if not allow_dirty and not dry_run:
        dirty = git_changes(project)
        if dirty:
            raise DirtyProjectError(
                f"{project} has uncommitted changes ({', '.join(dirty[:5])}"
                f"{', ...' if len(dirty) > 5 else ''}); commit or stash them first, "
                "so the update is one reviewable change, or pass --allow-dirty"
            )
    theirs_kit = kit or installed_kit()
    with tempfile.TemporaryDirectory(prefix="new-backend-update-") as scratch:
        with base_kit(record.generator_version, record.template_hash, also=kit) as base:
            base_dir = base.render(old.cookiecutter_context(), Path(scratch, "base"))
            base_label = base.label
        theirs_dir = theirs_kit.render(new.cookiecutter_context(), Path(scratch, "theirs"))
        labels = ("yours", base_label, theirs_kit.label)
        changes = _plan(project, base_dir, theirs_dir, labels, engine)
    result = UpdateResult(
        project, old, new, base_label, theirs_kit.label, tuple(changes), dry_run=dry_run,
        notes=tuple(notes),
    )  # fmt: skip
    if not dry_run:
        _apply(project, result.changes)
    return result


def git_changes(project: Path) -> list[str]:
    """Uncommitted changes to tracked files under ``project`` (empty when not in git)."""
    git = shutil.which("git")
    if git is None:
        return []
    inside = subprocess.run(
        [git, "rev-parse", "--is-inside-work-tree"], cwd=project, capture_output=True, text=True
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return []
    status = subprocess.run(
        [git, "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--", "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    return [line[3:] for line in status.stdout.splitlines() if line.strip()]


def _files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _plan(
    project: Path, base_dir: Path, theirs_dir: Path, labels: tuple[str, str, str], engine: str
) -> list[FileUpdate]:
    base, theirs = _files(base_dir), _files(theirs_dir)
    changes = []
    for path in sorted(base.keys() | theirs.keys()):
        b = base[path].read_bytes() if path in base else None
        t = theirs[path].read_bytes() if path in theirs else None
        if b == t:
            continue  # the template did not change it: it is the user's as it is
        mine = project / path
        if mine.is_symlink() or (mine.exists() and not mine.is_file()):
            changes.append(
                FileUpdate(path, "conflict", None, None, "not a regular file: left alone")
            )
            continue
        o = mine.read_bytes() if mine.is_file() else None
        if o == t:
            continue
        if t is None:
            if o is None:
                continue
            if o == b:
                changes.append(FileUpdate(path, "removed", o, None))
            else:
                changes.append(
                    FileUpdate(
                        path, "conflict", o, o, "removed by the template, edited by you: kept"
                    )
                )
        elif o is None:
            if b is None:
                changes.append(FileUpdate(path, "added", None, t))
            else:
                changes.append(
                    FileUpdate(
                        path, "conflict", None, None,
                        "deleted by you, changed by the template: left deleted",
                    )
                )  # fmt: skip
        elif o == b:
            changes.append(FileUpdate(path, "updated", o, t))
        else:
            changes.append(_merge(path, b or b"", o, t, labels, engine))
    return changes


def _merge(
    path: str, b: bytes, o: bytes, t: bytes, labels: tuple[str, str, str], engine: str
) -> FileUpdate:
    try:
        texts = [x.decode("utf-8") for x in (b, o, t)]
    except UnicodeDecodeError:
        return FileUpdate(path, "conflict", o, o, "binary, changed by both: yours kept")
    merged = merge3(*texts, labels=labels, engine=engine)
    after = merged.text.encode("utf-8")
    if merged.conflicts:
        return FileUpdate(path, "conflict", o, after, "changed by both: resolve the markers")
    return FileUpdate(path, "merged", o, after)


def _apply(project: Path, changes: tuple[FileUpdate, ...]) -> None:
    for change in changes:
        path = project / change.path
        if change.after is None and change.before is not None:
            path.unlink()
            parent = path.parent
            while parent != project and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent
        elif change.after is not None and change.after != change.before:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(change.after)


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check_project` found."""

    project: Path
    made_with: str
    installed: str
    #: Files the installed generator renders differently from the project's base; without
    #: the base, the plumbing files that differ from the installed generator's render.
    lagging: tuple[str, ...]
    #: Plumbing files (not in :data:`USER_FILES`) that differ from the base.
    edited: tuple[str, ...]
    #: Why the base could not be rebuilt, if it could not (then ``edited`` is unknown).
    base_missing: str = ""

    @property
    def up_to_date(self) -> bool:
        """Neither lagging nor hand-edited."""
        return not self.lagging and not self.edited and not self.base_missing


def check_project(project: str | os.PathLike[str] = ".", kit: Kit | None = None) -> CheckResult:
    """Compare ``project`` with its base and with the installed generator's render."""
    project = Path(project)
    record = read_record(project)
    theirs_kit = kit or installed_kit()
    context = record.answers.cookiecutter_context()
    with tempfile.TemporaryDirectory(prefix="new-backend-check-") as scratch:
        theirs = _files(theirs_kit.render(context, Path(scratch, "theirs")))
        try:
            with base_kit(record.generator_version, record.template_hash, also=kit) as kit_used:
                base = _files(kit_used.render(context, Path(scratch, "base")))
                made_with = kit_used.label
        except BaseUnavailableError as e:
            # Without the base a difference may be the template's or the user's, and the
            # user's own files differ by design: only the plumbing is compared.
            lagging = tuple(
                sorted(
                    p for p in theirs if p not in USER_FILES and _differs(theirs[p], project / p)
                )
            )
            made_with = f"new-backend {record.generator_version}"
            if record.template_hash:
                made_with += f" (template {record.template_hash[:8]})"
            return CheckResult(project, made_with, theirs_kit.label, lagging, (), str(e))
        lagging = tuple(
            sorted(p for p in base.keys() | theirs.keys() if _differs(base.get(p), theirs.get(p)))
        )
        edited = tuple(
            sorted(p for p in base if p not in USER_FILES and _differs(base[p], project / p))
        )
    return CheckResult(project, made_with, theirs_kit.label, lagging, edited)


def _differs(a: Path | None, b: Path | None) -> bool:
    a_bytes = a.read_bytes() if a is not None and a.is_file() else None
    b_bytes = b.read_bytes() if b is not None and b.is_file() else None
    return a_bytes != b_bytes
