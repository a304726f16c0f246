"""Render the template into a new project: the one function everything calls.

The render happens in a staging folder beside the target, which is renamed into
place only when it is complete; an existing target is moved aside (never
deleted) when ``force`` is given. cookiecutter's replay file and cache go to a
temporary folder, never to ``$HOME``. Updating a project in place, with a
three-way merge, is :mod:`new_backend.update`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cookiecutter.exceptions import CookiecutterException
from cookiecutter.main import cookiecutter

from new_backend.exceptions import (
    AnswersFileError,
    OutputDirError,
    TargetExistsError,
    TemplateError,
    WriteError,
)
from new_backend.merge import unified_diff
from new_backend.validate import DEFAULT_DEVICES, DEFAULT_NAME, DEFAULT_OPS, Answers

ANSWERS_FILE = ".new-backend.json"


def template_dir() -> Path:
    """The cookiecutter template: inside the package when installed, at the repo top otherwise."""
    packaged = Path(__file__).with_name("template")
    if (packaged / "cookiecutter.json").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "template"
    if (checkout / "cookiecutter.json").is_file():
        return checkout
    raise TemplateError(f"the template is missing (looked in {packaged} and {checkout})")


@dataclass(frozen=True)
class GenerationResult:
    """What :func:`generate_project` did (or, for a dry run, would do)."""

    answers: Answers
    target: Path
    files: tuple[str, ...]
    backup: Path | None = None
    dry_run: bool = False
    #: For a dry run over an existing folder: the diff from it to the new render.
    diff: str = ""
    #: For a dry run over an existing folder: its files the new render does not have.
    left_behind: tuple[str, ...] = ()
    #: The replaced folder was a git repository (its .git is in the backup now).
    backup_had_git: bool = False


def generate_project(
    backend_name: str = DEFAULT_NAME,
    ops: str | list[str] | tuple[str, ...] = DEFAULT_OPS,
    devices: str | list[str] | tuple[str, ...] = DEFAULT_DEVICES,
    impl: str = "dummy",
    library: str = "",
    output_dir: str | os.PathLike[str] = ".",
    force: bool = False,
    dry_run: bool = False,
    target: str | os.PathLike[str] | None = None,
) -> GenerationResult:
    """Generate the project for one backend into ``output_dir/backend_name`` (or ``target``).

    Everything is validated before anything is written. Raises a
    :class:`~new_backend.exceptions.NewBackendError` subclass on bad input.
    ``target`` names the project folder itself, for re-rendering a project
    whose folder is not called ``backend_name`` or from inside it.
    """
    answers = Answers.checked(backend_name, ops, devices, impl, library)
    target = Path(target) if target is not None else Path(output_dir) / answers.backend_name
    output_dir = target.parent
    _check_output_dir(output_dir)
    exists = target.exists() or target.is_symlink()
    if exists and not force:
        hint = (
            f"`new-backend update {target}` merges the template into it; "
            if (target / ANSWERS_FILE).is_file()
            else ""
        )
        raise TargetExistsError(
            f"{target} already exists; {hint}use --force to replace it "
            "(the existing folder is moved aside, not deleted)"
        )

    if dry_run:
        with tempfile.TemporaryDirectory(prefix="new-backend-dry-run-") as scratch:
            rendered = _render(answers, Path(scratch))
            files = _list_files(rendered)
            if not exists:
                return GenerationResult(answers, target, files, dry_run=True)
            diff, left = _compare_with_existing(target, rendered, files)
        return GenerationResult(
            answers, target, files, backup=_backup_path(target), dry_run=True, diff=diff,
            left_behind=left,
        )  # fmt: skip

    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{answers.backend_name}.staging-", dir=output_dir))
    except OSError as e:
        raise OutputDirError(f"output directory {output_dir}: {e.strerror or e}") from None
    try:
        try:
            rendered = _render(answers, staging)
        except OSError as e:
            if e.filename:
                raise
            # A full disk or a quota says so without a file name: name the folder.
            raise WriteError(
                f"writing the project into {output_dir.resolve()}: {e.strerror or e}"
            ) from None
        files = _list_files(rendered)
        backup = None
        if exists:
            backup = _backup_path(target)
            target.rename(backup)
        try:
            rendered.rename(target)
        except OSError:
            if backup is not None:
                backup.rename(target)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # our own scratch folder, never the user's
    had_git = backup is not None and (backup / ".git").exists()
    return GenerationResult(answers, target, files, backup=backup, backup_had_git=had_git)


def locate_target(output_dir: Path, name: str | None) -> tuple[Path, dict | None]:
    """The folder a render of backend ``name`` replaces, and its recorded answers if any.

    When ``output_dir`` is itself a project of that name (the command runs
    inside the project) the target is ``output_dir``, not a copy nested in it;
    ``name=None`` means whichever project ``output_dir`` is, else the default.
    Any other render inside a project (another name, or from a folder below
    one) would nest a project in it: :class:`OutputDirError`.
    """
    here = output_dir / ANSWERS_FILE
    if here.is_file():
        recorded = read_answers(here)
        if name is None or name == recorded["backend_name"]:
            return output_dir.resolve(), recorded
    project = enclosing_project(output_dir)
    if project is not None:
        where = "this folder" if output_dir == Path(".") else str(output_dir)
        raise OutputDirError(
            f"{where} is inside the project {project} (it has a {ANSWERS_FILE}): "
            f"run 'new-backend update {project}' to change that project, or give -o a "
            "folder outside it to create another one"
        )
    target = output_dir / (name or DEFAULT_NAME)
    answers_file = target / ANSWERS_FILE
    return target, read_answers(answers_file) if answers_file.is_file() else None


def enclosing_project(folder: Path) -> Path | None:
    """The generated project ``folder`` is in or below (it has an answers file), if any."""
    with contextlib.suppress(OSError):
        folder = folder.resolve()
        for place in (folder, *folder.parents):
            with contextlib.suppress(OSError):
                if (place / ANSWERS_FILE).is_file():
                    return place
    return None


def read_answers(path: str | os.PathLike[str]) -> dict:
    """Load a ``.new-backend.json`` file written into every generated project."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AnswersFileError(f"cannot read answers file {path}: {e}") from None
    keys = {"backend_name", "ops", "devices", "impl"}
    if not isinstance(data, dict) or not keys <= data.keys():
        raise AnswersFileError(
            f"{path} is not a new-backend answers file (it needs {', '.join(sorted(keys))})"
        )
    return {k: data[k] for k in keys} | ({"library": data["library"]} if "library" in data else {})


def _check_output_dir(output_dir: Path) -> None:
    probe = output_dir
    while not probe.exists():
        if probe.is_symlink():
            raise OutputDirError(f"output directory {output_dir}: {probe} is a broken link")
        probe = probe.parent
    if not probe.is_dir():
        raise OutputDirError(f"output directory {output_dir}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputDirError(f"output directory {output_dir}: {probe} is not writable")
    try:  # root passes access() on /proc, /sys and read-only mounts: try for real
        tempfile.TemporaryDirectory(prefix=".new-backend-probe-", dir=probe).cleanup()
    except OSError as e:
        # /proc answers "No such file or directory" for a folder that is there: not the reason
        why = "" if e.errno == errno.ENOENT else f" ({e.strerror or e})"
        raise OutputDirError(
            f"output directory {output_dir}: the folder {probe} cannot be written{why}; "
            "choose another -o"
        ) from None


def _render(answers: Answers, dest: Path) -> Path:
    """Render the installed template into ``dest/<backend_name>`` and return that path."""
    return render_template(template_dir(), answers.cookiecutter_context(), dest)


def render_template(template: Path, context: dict[str, str], dest: Path) -> Path:
    """Render ``template`` with cookiecutter's ``context`` into ``dest``; the project folder.

    cookiecutter's config, replay file and cache, and the rendered hook scripts
    it leaves in the temporary folder, all go to a scratch folder removed here.
    SIGINT and SIGTERM wait until cookiecutter returns (a second or so): one
    that came while a hook script ran would remove the scratch folder under it.
    """
    with tempfile.TemporaryDirectory(prefix="new-backend-cookiecutter-") as home:
        config = Path(home, "config.yaml")
        config.write_text(
            f"cookiecutters_dir: {json.dumps(str(Path(home, 'cookiecutters')))}\n"
            f"replay_dir: {json.dumps(str(Path(home, 'replay')))}\n",
            encoding="utf-8",
        )
        system_tmp = tempfile.tempdir
        tempfile.tempdir = home  # cookiecutter never deletes its rendered hook scripts
        deferred = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            project = cookiecutter(
                str(template),
                no_input=True,
                extra_context=context,
                output_dir=str(dest),
                config_file=str(config),
            )
        except CookiecutterException as e:
            reason = str(e).split(". Context:")[0]  # cookiecutter appends the whole context
            raise TemplateError(f"rendering the template failed: {reason}") from e
        finally:
            tempfile.tempdir = system_tmp
            signal.pthread_sigmask(signal.SIG_SETMASK, deferred)
    return Path(project)


def _compare_with_existing(
    target: Path, rendered: Path, files: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """The diff from ``target`` to ``rendered``, and the files only ``target`` has."""
    diff = []
    for name in files:
        old = target / name
        before = old.read_bytes() if old.is_file() else None
        after = (rendered / name).read_bytes()
        if before != after:
            diff.append(unified_diff(name, before, after))
    left = sorted(
        p.relative_to(target).as_posix()
        for p in target.rglob("*")
        if (p.is_file() or p.is_symlink()) and ".git" not in p.relative_to(target).parts
    )
    extra = [name for name in left if name not in set(files)]
    if (target / ".git").exists():
        extra.insert(0, ".git/")
    return "".join(diff), tuple(extra)


def _list_files(root: Path) -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()))


def _backup_path(target: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = target.with_name(f"{target.name}.backup-{stamp}")
    n = 1
    while candidate.exists() or candidate.is_symlink():
        candidate = target.with_name(f"{target.name}.backup-{stamp}-{n}")
        n += 1
    return candidate
