"""The `reinloop` command: run a task, resume a thread, inspect its history and state (on the terminal, or on a
local web page with `reinloop inspect`), prune and mark its checkpoints, draw the graph, and run the
evaluation (`reinloop eval`, over `reinloop_eval`). Runs are saved in a runs database (`--db` or REINLOOP_DB),
so any run can be resumed or inspected later by its thread id. The exit code is one per finish reason (each
guard's `exit_code`), 2 for a problem the user fixes, 75 for a thread another process is running, 130 for
Ctrl-C, 1 for an unexpected failure.

`parser` reads the command line, `commands` does each command (over `reinloop.runs`), `display` prints what
they return, `review` asks about calls that wait for approval; text from models and tools is printed as text,
never read as rich markup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from reinloop.errors import ReinloopError, ThreadBusyError
from reinloop.guards import BUSY_EXIT_CODE, exit_codes

__all__ = ["BUSY", "EXIT_CODES", "INTERRUPTED", "USAGE_ERROR", "CommandError", "Interrupted", "main"]

EXIT_CODES: dict[str, int] = exit_codes()
USAGE_ERROR = 2
BUSY = BUSY_EXIT_CODE
BUSY_TEMPLATE = (
    "thread {exc.thread!r} is being run by another process ({exc.holder}); nothing was run or saved: try again "
    "once that run ends, or pass --thread-wait SECONDS to wait for it"
)
INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


class CommandError(Exception):
    """A problem the user fixes: reported on one line, exit code 2."""


class Interrupted(Exception):
    """Ctrl-C, once the command has stopped what it started: reported as what was saved and how to continue,
    exit code 130."""


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.text import Text

    from reinloop.cli.display import progress
    from reinloop.cli.parser import build_parser

    args = build_parser().parse_args(argv)
    # Piped output is not cut to 80 columns: tables stay readable in logs and tests.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    errors = Console(stderr=True, highlight=False)
    error = ("error:", "bold red")
    try:
        with progress(errors, shown=not getattr(args, "quiet", False)):
            code: int = args.handler(args, console)
        return code
    except ThreadBusyError as exc:
        errors.print(Text.assemble(("busy:", "bold yellow"), " " + BUSY_TEMPLATE.format(exc=exc)), soft_wrap=True)
        return BUSY
    except (CommandError, ReinloopError) as exc:
        errors.print(Text.assemble(error, f" {exc}"), soft_wrap=True)
        return USAGE_ERROR
    except Interrupted as exc:
        errors.print(Text(str(exc), "yellow"), soft_wrap=True)
        return INTERRUPTED
    except KeyboardInterrupt:  # a command that saves no runs, or a second Ctrl-C while the first was handled
        errors.print(Text("interrupted", "yellow"))
        return INTERRUPTED
    except Exception as exc:  # a failing model server, a full disk: one line, the saved steps stay
        if os.environ.get("REINLOOP_DEBUG"):
            raise
        reason = " ".join(str(exc).split()) or type(exc).__name__
        detail = (
            f" {type(exc).__name__}: {reason} (steps saved so far are kept; 'reinloop resume' continues a run; "
            "REINLOOP_DEBUG=1 shows the traceback)"
        )
        errors.print(Text.assemble(error, detail), soft_wrap=True)
        return 1
