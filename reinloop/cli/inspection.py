"""The commands that look at what a run is given and what it saved, and keep the runs database bounded:
`tools` and `graph` (the toolset and the agent's graph), `history` and `show` (a thread's steps and state),
`prune` and `mark` (its checkpoints)."""

from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from typing import TYPE_CHECKING

from langchain_core.runnables import RunnableConfig
from rich.console import Console

from reinloop.checkpoint import is_unreadable
from reinloop.cli import CommandError, display
from reinloop.errors import CheckpointError
from reinloop.runs import RunsDatabase, mcp_tools, open_runs, workspace_folder

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["PRUNE_DAMAGED_TEMPLATE", "graph", "history", "mark", "prune", "show", "tools"]

PRUNE_DAMAGED_TEMPLATE = (
    "prune stopped at a damaged checkpoint in {location} ({error}): its thread was left as it was (threads pruned "
    "before it stay pruned); 'reinloop show THREAD' tells whether a thread is damaged"
)


def tools(args: argparse.Namespace, console: Console) -> int:
    from reinloop.config import AgentConfig
    from reinloop.testing import ScriptedChatModel
    from reinloop.tools import ToolRegistry, default_toolset

    settings = {"mcp_config": args.mcp_config, "mcp_prefix": args.mcp_prefix}
    with ExitStack() as stack:
        # A run's toolset has translate, with the run's model: a model that is never called stands in for it.
        toolset = default_toolset(workspace_folder(args.workspace), model=ScriptedChatModel(),
                                  weather_base_url=os.environ.get("REINLOOP_WEATHER_URL"))  # fmt: skip
        toolset += mcp_tools(stack, settings, AgentConfig().tool_timeout_s)
        rows = [(entry.signature, _source(entry.tool)) for entry in ToolRegistry(toolset)]
    display.tool_table(console, rows)
    return 0


def _source(tool: BaseTool) -> str:
    from reinloop.tools.mcp import MCPTool

    return f"MCP server {tool.server}" if isinstance(tool, MCPTool) else "built-in"


def history(args: argparse.Namespace, console: Console) -> int:
    from reinloop.graph import agent_topology
    from reinloop.pruning import marks

    with open_runs(args.db, must_exist=True) as db:
        config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
        snapshots = list(agent_topology(db.saver).get_state_history(config))
        if not snapshots:
            raise CommandError(f"unknown thread {args.thread!r} in {db.location}")
        labels = {found.checkpoint_id: found.label or "marked" for found in marks(db.saver, args.thread)}
        display.history_table(console, args.thread, snapshots, labels)
    return 0


def show(args: argparse.Namespace, console: Console) -> int:
    from reinloop.graph import agent_topology

    with open_runs(args.db, must_exist=True) as db:
        snapshot = agent_topology(db.saver).get_state({"configurable": {"thread_id": args.thread}})
        if not snapshot.values:
            raise CommandError(f"unknown thread {args.thread!r} in {db.location}")
        if args.json:
            display.state_json(console, snapshot.values)
        else:
            display.thread_state(console, args.thread, snapshot)
    return 0


def graph(args: argparse.Namespace, console: Console) -> int:
    from reinloop import draw
    from reinloop.graph import agent_topology

    if args.format in ("png", "svg") and args.output is None:
        raise CommandError(f"--format {args.format} writes a file: give it with -o FILE")
    result = draw(agent_topology(), args.format, args.output)
    if args.output is None:
        console.print(result, markup=False, highlight=False)
    else:
        display.wrote(console, args.output)
    return 0


# a bounded database ------------------------------------------------------------------------------------


def prune(args: argparse.Namespace, console: Console) -> int:
    from reinloop.pruning import prune as prune_database

    if args.keep < 1:
        raise CommandError("--keep must be at least 1: the latest checkpoint is what resumes a thread")
    if args.keep_ids and not args.threads:
        raise CommandError("--keep-id needs the thread of the checkpoint: give it with --thread")
    with open_runs(args.db, must_exist=True) as db:
        known = [_checkpoint_ids(db, thread) for thread in args.threads or ()]
        keep_ids = [_resolved(given, [cid for ids in known for cid in ids]) for given in args.keep_ids]
        try:
            report = prune_database(db.saver, args.threads, keep=args.keep, keep_ids=keep_ids, vacuum=args.vacuum,
                                    dry_run=args.dry_run)  # fmt: skip
        except Exception as exc:
            # prune reads the rows it keeps with the saver's serializer itself: a damaged one fails there.
            if not is_unreadable(exc):
                raise
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            raise CheckpointError(PRUNE_DAMAGED_TEMPLATE.format(location=db.location, error=error)) from exc
        display.prune_report(console, report, db.location)
    return 0


def mark(args: argparse.Namespace, console: Console) -> int:
    from reinloop.pruning import mark as mark_checkpoint
    from reinloop.pruning import unmark

    if args.remove and args.checkpoint is None:
        raise CommandError("--remove needs the marked checkpoint: give it with --checkpoint")
    with open_runs(args.db, must_exist=True) as db:
        ids = _checkpoint_ids(db, args.thread)
        chosen = _resolved(args.checkpoint, ids) if args.checkpoint else ids[0]
        config: RunnableConfig = {"configurable": {"thread_id": args.thread, "checkpoint_id": chosen}}
        if args.remove:
            display.unmarked(console, args.thread, chosen, unmark(db.saver, config))
        else:
            display.marked(console, args.thread, mark_checkpoint(db.saver, config, args.label), args.label)
    return 0


def _checkpoint_ids(db: RunsDatabase, thread: str) -> list[str]:
    """The ids of the thread's checkpoints, newest first."""
    ids = [
        found.config["configurable"]["checkpoint_id"]
        for found in db.saver.list({"configurable": {"thread_id": thread}})
    ]
    if not ids:
        raise CommandError(f"unknown thread {thread!r} in {db.location}")
    return ids


def _resolved(given: str, ids: list[str]) -> str:
    """The one id in `ids` that `given` ends: ids are long, and 'history' shows their last characters."""
    matches = [cid for cid in ids if cid.endswith(given)]
    if len(matches) != 1:
        found = "no checkpoint" if not matches else f"{len(matches)} checkpoints"
        raise CommandError(f"{found} of the thread has an id ending in {given!r}; see 'reinloop history THREAD'")
    return matches[0]
