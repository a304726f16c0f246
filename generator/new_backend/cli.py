"""The ``new-backend`` command: parse, validate, call :func:`generate_project`, report.

Known errors become one line on stderr and an exit code: 2 for bad input (as
click's usage errors), 1 for everything else. No tracebacks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from new_backend import __version__
from new_backend.catalogue import load_catalogue
from new_backend.exceptions import AnswersFileError, InvalidAnswerError, NewBackendError
from new_backend.generate import ANSWERS_FILE, GenerationResult, generate_project, read_answers
from new_backend.params import BACKEND_NAME, DEVICE_LIST, OP_LIST
from new_backend.validate import (
    DEFAULT_DEVICES,
    DEFAULT_NAME,
    DEFAULT_OPS,
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
        except click.Abort:
            self._fail("aborted", 1)
        except NewBackendError as e:
            self._fail(str(e), e.exit_code)
        sys.exit(status if isinstance(status, int) else 0)

    @staticmethod
    def _fail(message: str, code: int) -> None:
        click.echo(f"Error: {' '.join(message.split())}", err=True)
        sys.exit(code)


@click.command(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
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
    help=f"Devices to register the backend for. [default: {','.join(DEFAULT_DEVICES)}]",
)
@click.option(
    "--impl",
    type=click.Choice(IMPLEMENTATIONS),
    help="What the ops do: 'dummy' zeroes outputs (the tutorial's backend); 'store' is a "
    "working reference implementation of every op over the c10d Store; 'mpi' runs every op "
    "on an MPI library (MPICH, Open MPI), for clusters launched with mpirun or srun. "
    "[default: dummy]",
)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder in which the project folder NAME is created.",
)
@click.option(
    "--force", is_flag=True, help="Replace an existing project; the old one is moved aside."
)
@click.option(
    "--dry-run", is_flag=True, help="List the files that would be written; write nothing."
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
    output_dir: Path,
    force: bool,
    dry_run: bool,
    from_answers: Path | None,
) -> None:
    """Generate a buildable torch.distributed backend called NAME (default: dummy).

    With no arguments it writes ./dummy/, the backend of PyTorch's tutorial
    "Customize Process Group Backends Using Cpp Extensions", done right.
    """
    answers = dict(
        backend_name=DEFAULT_NAME, ops=DEFAULT_OPS, devices=DEFAULT_DEVICES, impl="dummy"
    )
    if from_answers is not None:
        answers.update(read_answers(from_answers))
    given = dict(backend_name=name, ops=ops, devices=devices, impl=impl)
    answers.update({k: v for k, v in given.items() if v is not None})
    try:
        Answers.checked(**answers)
    except InvalidAnswerError as e:
        # Options were checked by their click types: what is wrong came from the file.
        raise AnswersFileError(f"{from_answers}: {e}") from None
    result = generate_project(**answers, output_dir=output_dir, force=force, dry_run=dry_run)
    _report(result)


def _report(result: GenerationResult) -> None:
    a = result.answers
    what = (
        f"backend {a.backend_name!r}, impl {a.impl}, ops {', '.join(a.ops)}; "
        f"devices {', '.join(a.devices)}"
    )
    if result.dry_run:
        click.echo(f"Would create {result.target} ({what}) with {len(result.files)} files:")
        for f in result.files:
            click.echo(f"  {f}")
        return
    if result.backup is not None:
        click.echo(f"Moved the existing {result.target} to {result.backup}")
    click.echo(f"Created {result.target} ({what})")
    click.echo("Next:")
    click.echo(f"  cd {result.target}")
    click.echo("  pip install --no-build-isolation .")
    click.echo("  pytest tests")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``new-backend`` command."""
    cli.main(args=argv, prog_name="new-backend")
