"""`reinloop inspect`: serve the runs database's threads as a local web page (`reinloop.inspect`) until Ctrl-C."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.text import Text

from reinloop.cli import CommandError

__all__ = ["DEFAULT_PORT", "MISSING_EXTRA_TEMPLATE", "PORT_TEMPLATE", "inspect"]

DEFAULT_PORT = 8765
PORT_TEMPLATE = "cannot serve on {host}:{port} (see above); pass another --port"
MISSING_EXTRA_TEMPLATE = (
    "reinloop inspect needs the inspect extra ({missing} is not installed): pip install 'reinloop[inspect]'"
)


def inspect(args: argparse.Namespace, console: Console) -> int:
    try:
        import uvicorn

        from reinloop.inspect import inspect_app
    except ImportError as exc:
        raise CommandError(MISSING_EXTRA_TEMPLATE.format(missing=exc.name or "a package")) from None
    from reinloop.inspect.app import LOOPBACK

    # Served beyond this machine (--host 0.0.0.0, an address of its own), it answers any host name.
    hosts = LOOPBACK if args.host in LOOPBACK else ["*"]
    app = inspect_app(args.db, allow_actions=args.allow_actions, no_memory=args.no_memory, hosts=hosts,
                      model=args.model, base_url=args.base_url)  # fmt: skip
    mode = "actions allowed: resume and approvals" if args.allow_actions else "read-only"
    console.print(Text.assemble(("reinloop inspect", "bold"), f" on http://{args.host}:{args.port}/ ",
                                (f"({mode}; Ctrl-C stops it)", "dim")))  # fmt: skip
    # uvicorn handles Ctrl-C itself: it stops serving and returns. It exits when it cannot listen, having
    # logged why (the port is taken).
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    except SystemExit:
        raise CommandError(PORT_TEMPLATE.format(host=args.host, port=args.port)) from None
    return 0
