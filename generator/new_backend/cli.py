"""The ``new-backend`` command: parse, validate, call :func:`generate_project`, report.

``new-backend update`` and ``new-backend check`` are subcommands
(:mod:`new_backend.update`); a backend called ``update`` or ``check`` is
generated with ``new-backend -- update``. Known errors become one line on
stderr and an exit code: 2 for bad input (as click's usage errors), 1 for
everything else. No tracebacks.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import ClassVar

import click

from new_backend import __version__
from new_backend.catalogue import load_catalogue
from new_backend.command import INTERRUPTED, TERMINATED, Terminated
from new_backend.exceptions import (
    AnswersFileError,
    ConflictError,
    InvalidAnswerError,
    NewBackendError,
    OutputDirError,
)
from new_backend.generate import (
    ANSWERS_FILE,
    GenerationResult,
    generate_project,
    locate_target,
    read_answers,
)
from new_backend.params import BACKEND_NAME, DEVICE_LIST, LIBRARY_NAME, OP_LIST
from new_backend.project import Project
from new_backend.validate import (
    DEFAULT_DEVICES,
    DEFAULT_NAME,
    DEFAULT_OPS,
    DEVICES,
    IMPLEMENTATIONS,
    Answers,
)


def _list_ops(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ops = load_catalogue().ops
    width = max(len(op.name) for op in ops)
    for op in ops:
        aliases = f"  (also: {', '.join(op.aliases)})" if op.aliases else ""
        click.echo(f"{op.name:<{width}}  {op.summary}")
        click.echo(f"{'':<{width}}  OpType::{op.op_type}; {op.python}{aliases}")
    ctx.exit(0)


class OneLineErrors(click.Command):
    """A click command that reports every known error as one line, without a traceback.

    Usage errors keep click's exit code 2, without the usage text; errors the
    generator raises on purpose exit with their own code (2 for bad input).
    """

    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        try:
            status = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            self._fail(e.format_message(), e.exit_code)
        except click.ClickException as e:
            self._fail(e.format_message(), e.exit_code)
        except click.Abort:  # click's word for Ctrl-C
            self._fail("interrupted", INTERRUPTED)
        except Terminated:  # SIGTERM (new_backend.command)
            self._fail("terminated", TERMINATED)
        except NewBackendError as e:
            self._fail(str(e), e.exit_code)
        except OSError as e:  # the file system refused: one line, not a traceback
            where = f"{e.filename}: " if e.filename else ""
            self._fail(f"{where}{e.strerror or e}", 1)
        sys.exit(status if isinstance(status, int) else 0)

    @staticmethod
    def _fail(message: str, code: int) -> None:
        click.echo(f"Error: {' '.join(message.split())}", err=True)
        sys.exit(code)


class WithSubcommands(OneLineErrors):
    """The generating command, which hands ``update ...`` and ``check ...`` to those commands.

    A click group cannot take an optional NAME argument and subcommands at
    once, so the first argument alone decides.
    """

    subcommands: ClassVar[dict[str, click.Command]] = {}

    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        if args and args[0] in self.subcommands:
            prog = f"{prog_name or 'new-backend'} {args[0]}"
            return self.subcommands[args[0]].main(args[1:], prog, standalone_mode, **extra)
        return super().main(args, prog_name, standalone_mode, **extra)


CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command(
    cls=WithSubcommands,
    context_settings=CONTEXT,
    epilog="Also: 'new-backend update [DIR]' merges a newer template (or new answers) into a "
    "project, keeping your edits; 'new-backend check [DIR]' says whether it lags. "
    "See 'new-backend update --help'.",
)
@click.argument("name", type=BACKEND_NAME, required=False)
@click.option(
    "--ops",
    type=OP_LIST,
    help="Collectives to implement, comma-separated; aliases such as all_reduce work; "
    f"'all' for every one. [default: {','.join(DEFAULT_OPS)}]",
)
@click.option(
    "--devices",
    type=DEVICE_LIST,
    help=f"Devices to register the backend for: {', '.join(DEVICES)}, and one out-of-tree "
    f"(PrivateUse1) device by its name, e.g. npu. [default: {','.join(DEFAULT_DEVICES)}]",
)
@click.option(
    "--impl",
    type=click.Choice(IMPLEMENTATIONS),
    help="What the ops do: 'dummy' zeroes outputs (the tutorial's backend); 'store' is a "
    "working reference implementation of every op over the c10d Store; 'mpi' runs every op "
    "on an MPI library (MPICH, Open MPI), for clusters launched with mpirun or srun; 'ucx' "
    "runs ring and tree algorithms over UCX's tagged messages (the teaching example). "
    "[default: dummy]",
)
@click.option(
    "--library",
    type=LIBRARY_NAME,
    help="The library the ops call, by its pkg-config name (ucx): setup.py finds it through "
    "pkg-config, <NAME>_HOME, or <NAME>_INCLUDE_DIR and <NAME>_LIBRARY_DIR, and links it with an "
    "rpath. Recorded in the project, so re-rendering keeps it. [default: none]",
)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder in which the project folder NAME is created; it must exist.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing project; the old one is moved aside. Its "
    f"{ANSWERS_FILE} gives the defaults. To keep your edits, use 'new-backend update'.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the files that would be written (with --force, the diff from the existing "
    "project); write nothing.",
)
@click.option(
    "--from-answers",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Re-render from a project's {ANSWERS_FILE}; other options override its values.",
)
@click.option(
    "--list-ops",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_ops,
    help="List the collectives new-backend knows and exit.",
)
@click.version_option(__version__, "--version", prog_name="new-backend")
def cli(
    name: str | None,
    ops: tuple[str, ...] | None,
    devices: tuple[str, ...] | None,
    impl: str | None,
    library: str | None,
    output_dir: Path,
    force: bool,
    dry_run: bool,
    from_answers: Path | None,
) -> None:
    """Generate a buildable torch.distributed backend called NAME (default: dummy).

    With no arguments it writes ./dummy/, the backend of PyTorch's tutorial
    "Customize Process Group Backends Using Cpp Extensions", done right.
    """
    defaults = dict(
        backend_name=DEFAULT_NAME, ops=DEFAULT_OPS, devices=DEFAULT_DEVICES, impl="dummy"
    )
    given = {
        k: v
        for k, v in dict(
            backend_name=name, ops=ops, devices=devices, impl=impl, library=library
        ).items()
        if v is not None
    }
    if not (output_dir.exists() or output_dir.is_symlink()):
        raise OutputDirError(
            f"output directory {output_dir} does not exist; create it first, or choose another -o"
        )
    from_file = read_answers(from_answers) if from_answers is not None else {}
    answers = _checked({**defaults, **from_file, **given}, from_answers)
    # Re-rendering an existing project: it is the target even from inside it, and
    # without --from-answers its own answers are the defaults.
    target, recorded = locate_target(
        output_dir, answers["backend_name"] if name or from_answers else None
    )
    if recorded is not None and from_answers is None:
        answers = _checked({**defaults, **recorded, **given}, target / ANSWERS_FILE)
    result = generate_project(
        **answers, output_dir=output_dir, force=force, dry_run=dry_run, target=target
    )
    _report(result)


def _checked(answers: dict, source: Path | None) -> dict:
    """``answers`` if valid; options were checked by their click types, so a bad
    value came from the answers file ``source``."""
    try:
        Answers.checked(**answers)
    except InvalidAnswerError as e:
        raise AnswersFileError(f"{source}: {e}") from None
    return answers


def _report(result: GenerationResult) -> None:
    a = result.answers
    what = (
        f"backend {a.backend_name!r}, impl {a.impl}, ops {', '.join(a.ops)}; "
        f"devices {', '.join(a.devices)}" + (f"; library {a.library}" if a.library else "")
    )
    if result.dry_run:
        aside = (
            f", after moving the existing {result.target} aside to {result.backup}"
            if result.backup is not None
            else ""
        )
        click.echo(f"Would create {result.target} ({what}) with {len(result.files)} files{aside}:")
        for f in result.files:
            click.echo(f"  {f}")
        if result.backup is not None:
            if result.left_behind:
                click.echo(f"Only in the existing {result.target} (they would stay in the backup):")
                for f in result.left_behind:
                    click.echo(f"  {f}")
            if result.diff:
                click.echo(f"Changes from the existing {result.target}:")
                click.echo(result.diff, nl=False)
            else:
                click.echo(f"The new render has the same content as the existing {result.target}.")
        return
    if result.backup is not None:
        click.echo(f"Moved the existing {result.target} to {result.backup}")
        if result.backup_had_git:
            click.echo(
                f"  with its .git and your edits; 'new-backend update {result.target}' "
                "merges the template into a project in place instead"
            )
        with contextlib.suppress(OSError):
            if Path.cwd() == result.backup.resolve():
                click.echo(f"  (this shell is now in the backup: cd {result.target.resolve()})")
    click.echo(f"Created {result.target} ({what})")
    click.echo("Next:")
    click.echo(f"  cd {result.target}")
    library = Project(a).user_library
    if library is not None:
        v = library.variable
        click.echo(
            f"  export {v}_HOME=/path/to/{library.name}   # unless pkg-config {library.name} "
            f"finds it (PKG_CONFIG_PATH); or {v}_INCLUDE_DIR and {v}_LIBRARY_DIR"
        )
    click.echo("  pip install --no-build-isolation .")
    click.echo("  pytest tests")


@click.command(cls=OneLineErrors, context_settings=CONTEXT)
@click.argument(
    "project", type=click.Path(file_okay=False, path_type=Path), default=Path("."), required=False
)
@click.option(
    "--ops",
    metavar="CHANGES",
    help="Change the ops: '+broadcast,+reduce_scatter' adds, '-allgather' removes (adding an "
    "op the project has, or removing one it lacks, changes nothing); a list without signs "
    "is the whole new list, and must keep the project's ops (drop one with -op).",
)
@click.option("--devices", type=DEVICE_LIST, help="Register the backend for these devices.")
@click.option("--impl", type=click.Choice(IMPLEMENTATIONS), help="Change the implementation.")
@click.option(
    "--dry-run", is_flag=True, help="Print the diff the update would apply; write nothing."
)
@click.option(
    "--allow-dirty", is_flag=True, help="Update a git project that has uncommitted changes."
)
def update(
    project: Path,
    ops: str | None,
    devices: tuple[str, ...] | None,
    impl: str | None,
    dry_run: bool,
    allow_dirty: bool,
) -> None:
    """Merge the installed template, or new answers, into the project in PROJECT (default: here).

    Three versions of each file the template writes are merged: what the
    generator that made the project rendered, what this one renders, and
    yours. Where both changed the same lines the file gets conflict markers,
    and the command lists it and exits 1. Your own files, .git and build
    outputs are never touched.
    """
    from new_backend.update import update_project

    result = update_project(
        project,
        ops=ops,
        devices=",".join(devices) if devices else None,
        impl=impl,
        dry_run=dry_run,
        allow_dirty=allow_dirty,
    )
    answers = "".join(f"; {change}" for change in answer_changes(result.old, result.new))
    verb = "Would update" if dry_run else "Updating"
    if result.base == result.theirs:  # new answers only: say the generator once
        click.echo(f"{verb} {project} with {result.theirs}, which made it{answers}")
    else:
        click.echo(f"{verb} {project} from {result.base} to {result.theirs}{answers}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    if not result.changes:
        click.echo(f"{project} is up to date: nothing to change.")
        return
    for change in result.changes:
        note = f"  ({change.note})" if change.note else ""
        click.echo(f"  {change.action:<8} {change.path}{note}")
    if dry_run:
        click.echo(result.diff, nl=False)
    conflicts = result.conflicts
    if conflicts:
        names = ", ".join(c.path for c in conflicts)
        would = "would need" if dry_run else "need"
        raise ConflictError(
            f"{len(conflicts)} file(s) {would} your attention: {names}; "
            + ("" if dry_run else "resolve the <<<<<<< markers, then commit")
        )
    if not dry_run:
        click.echo(f"Updated {project}: review with 'git diff', then commit.")


def answer_changes(old: Answers, new: Answers) -> list[str]:
    """What an update changes in the answers: ``ops: +broadcast, -allgather``,
    ``impl: dummy -> store``, ``devices: cpu -> cpu, cuda``."""
    changes = []
    ops = [f"+{op}" for op in new.ops if op not in old.ops]
    ops += [f"-{op}" for op in old.ops if op not in new.ops]
    if ops:
        changes.append(f"ops: {', '.join(ops)}")
    if old.devices != new.devices:
        changes.append(f"devices: {', '.join(old.devices)} -> {', '.join(new.devices)}")
    if old.impl != new.impl:
        changes.append(f"impl: {old.impl} -> {new.impl}")
    return changes


@click.command(cls=OneLineErrors, context_settings=CONTEXT)
@click.argument(
    "project", type=click.Path(file_okay=False, path_type=Path), default=Path("."), required=False
)
def check(project: Path) -> None:
    """Exit 1, listing the files, when the project in PROJECT lags the installed generator
    or its plumbing files were edited by hand; exit 0 when it is up to date.
    """
    from new_backend.update import USER_FILES, check_project

    result = check_project(project)
    if result.up_to_date:
        click.echo(f"{project} is up to date with {result.installed}.")
        return
    if result.lagging and result.base_missing:
        click.echo(
            f"{project} was made by {result.made_with}, not {result.installed}. "
            f"Plumbing files that differ from what {result.installed} renders "
            "(the template's changes or your edits):"
        )
    elif result.lagging:
        click.echo(
            f"{project} lags {result.installed}: it was made by {result.made_with}. "
            f"Files the template changed ('new-backend update' merges them in):"
        )
    for name in result.lagging:
        click.echo(f"  {name}")
    if result.base_missing:
        click.echo(f"Cannot tell which files were edited by hand: {result.base_missing}")
    if result.edited:
        click.echo(
            f"Plumbing files edited by hand (not {', '.join(USER_FILES[:-1])} or "
            f"{USER_FILES[-1]}; an update merges them, and may conflict):"
        )
        for name in result.edited:
            click.echo(f"  {name}")
    sys.exit(1)


WithSubcommands.subcommands = {"update": update, "check": check}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``new-backend`` command."""
    cli.main(args=argv, prog_name="new-backend")
