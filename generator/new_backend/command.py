"""The ``new-backend`` command's entry point: interrupts end in one line, at any moment.

A Ctrl-C or a SIGTERM, even while the command is still importing, ends it
with one line on stderr and no traceback; during a render, the staging folder
is removed first (:func:`new_backend.generate.generate_project`'s ``finally``).
"""

from __future__ import annotations

import signal
import sys

#: The exit codes of a command ended by SIGINT and by SIGTERM, as shells report them.
INTERRUPTED = 130
TERMINATED = 143


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM, as SIGINT raises KeyboardInterrupt."""


def _terminate(_signum: int, _frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> None:
    """Run the ``new-backend`` command (:func:`new_backend.cli.main`)."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        from new_backend.cli import main as cli_main

        cli_main(argv)
    except Terminated:  # before the CLI's own handling (new_backend.cli.OneLineErrors)
        print("Error: terminated", file=sys.stderr)
        sys.exit(TERMINATED)
    except KeyboardInterrupt:
        print("\nError: interrupted", file=sys.stderr)  # the newline closes the terminal's ^C
        sys.exit(INTERRUPTED)
