"""What each `reinloop` command does: it opens the runs database, builds or reads the agent, and hands what to
print to `display`. Each returns the exit code; a problem the user fixes raises `CommandError`."""

from __future__ import annotations

import argparse
import os
import shlex
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt
from rich.console import Console

from reinloop.checkpoint import database_label, is_postgres_url, is_unreadable, open_checkpointer
from reinloop.cli import EXIT_CODES, CommandError, Interrupted, display, review
from reinloop.errors import CheckpointError, ReinloopError
from reinloop.eval.simulated import EXTRA_FAULTS
from reinloop.state import read_input
from reinloop.text import counted

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["default_db", "evaluate", "graph", "history", "mark", "prune", "resume", "run", "show", "tools"]

# Run settings saved with each checkpoint (never keys), so `resume` rebuilds the same agent: with the MCP
# config's path, not its content (its env may hold secrets), so a resumed run starts the same servers.
SETTINGS = ("model", "base_url", "workspace", "protocol", "approve", "preset", "mcp_config", "mcp_prefix")
# The toolset's tools whose calls wait for the person at the terminal unless --approve names others: those
# that change files and data.
DEFAULT_APPROVALS = ("file_write", "db_insert")
# The key of a `stream_mode="updates"` chunk holding the interrupts a run stopped at (LangGraph made its own
# constant for it private).
INTERRUPTS_KEY = "__interrupt__"
LIMITS = (
    "max_iterations",
    "error_threshold",
    "max_replans",
    "tool_timeout_s",
    "context_token_budget",
    "run_token_budget",
)
RATES = (
    "fault_rate",
    "tool_fault_rate",
    "correct_rate",
    "runaway_rate",
    "stubborn_rate",
    *(f"{fault}_rate" for fault in EXTRA_FAULTS),
)
WORKSPACE_TEMPLATE = "the workspace {workspace} is not a folder ({file} is a file); pass --workspace a folder"
MEMORY_TEMPLATE = (
    "the memory database {path} cannot be opened ({reason}); move it away, or pass --no-memory to run without "
    "long-term memory"
)
NEW_DATABASE_TEMPLATE = "cannot create or open the SQLite database at {path}: {found} is a file, not a folder"
# What Ctrl-C reports of the thread, read back from the runs database once the run has stopped.
NOTHING_SAVED_TEMPLATE = "interrupted: nothing was saved; thread {thread} has no checkpoint (run the task again)"
NOTHING_NEW_TEMPLATE = "interrupted: nothing new was saved; thread {thread} is as it was at step {step} ({rounds} done)"
SAVED_TEMPLATE = "interrupted: thread {thread} is saved up to step {step} ({rounds} done)"
CONTINUE_TEMPLATE = "; continue it with: {command}"
UNREAD_TEMPLATE = "interrupted; what thread {thread} has saved cannot be read ({error}): see 'reinloop show {thread}'"
PRUNE_DAMAGED_TEMPLATE = (
    "prune stopped at a damaged checkpoint in {location} ({error}): its thread was left as it was (threads pruned "
    "before it stay pruned); 'reinloop show THREAD' tells whether a thread is damaged"
)


def default_db() -> str | Path:
    """Where runs are saved: REINLOOP_DB (a path or a ``postgresql://`` URL), else the user data folder."""
    if env := os.environ.get("REINLOOP_DB"):
        return env if is_postgres_url(env) else Path(env)
    return _data_folder() / "runs.sqlite"


# run and resume ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace, console: Console) -> int:
    # Checked before a model server starts or a database opens: a blank task is a usage error.
    task_input = read_input({"task": args.task})
    thread = args.thread or f"run-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    settings = _given(args)
    watch = _Watch(thread, args.db)
    with (
        _told_on_interrupt(watch),
        _database(args.db, must_exist=False) as db,
        _agent(args, settings, db) as built,
    ):
        config = _run_config(thread, built.settings)
        if watch.begin(built.agent).next:
            raise CommandError(f"thread {thread!r} is stopped mid-step; continue it with: {watch.command}")
        if not args.quiet:
            display.run_header(console, thread, built.settings["model"], db.location)
        final = _stream(built, task_input, config, console, args)
        return _finish(final, watch, console, args.quiet)


def resume(args: argparse.Namespace, console: Console) -> int:
    from reinloop.resume import prepare_resume

    watch = _Watch(args.thread, args.db)
    with _told_on_interrupt(watch), _database(args.db, must_exist=True) as db:
        saved = _saved_settings(db, args.thread)
        settings = {**saved, **{k: v for k, v in _given(args).items() if v is not None}}
        if args.preset and not args.protocol:
            settings["protocol"] = None  # the new preset's protocol, not the one the run was saved with
        with _agent(args, settings, db) as built:
            config = _run_config(args.thread, built.settings)
            if not args.quiet:
                display.resume_header(console, args.thread, built.settings["model"])
            watch.begin(built.agent)
            prepared = prepare_resume(built.agent, config, extra_iterations=args.extra_iterations, hint=args.hint)
            final = _stream(built, None, prepared, console, args)
            return _finish(final, watch, console, args.quiet)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    workspace = str(_workspace(args.workspace).resolve()) if args.workspace else None
    approve = ",".join(args.approve) if args.approve else None
    # Absolute, as the workspace: a resume may run from another folder.
    mcp_config = str(Path(args.mcp_config).resolve()) if args.mcp_config else None
    return {"model": args.model, "base_url": args.base_url, "workspace": workspace, "protocol": args.protocol,
            "approve": approve, "preset": args.preset, "mcp_config": mcp_config,
            "mcp_prefix": "true" if args.mcp_prefix else None}  # fmt: skip


def _stream(built: _Built, payload: Any, config: RunnableConfig, console: Console, args: argparse.Namespace) -> Any:
    """Run until the run ends, answering each approval it stops at (`review`); the thread's final state."""
    from langgraph.errors import is_invalid_resume
    from pydantic import ValidationError

    agent, thread = built.agent, (config.get("configurable") or {})["thread_id"]
    saved = agent.get_state({"configurable": {"thread_id": thread}}).values
    printer = display.StepPrinter(console, args.quiet, saved, built.config.max_iterations)
    answer = review.reviewer(console, thread, yes=args.yes)
    waiting: list[Interrupt] = []
    while True:
        try:
            waiting = _until_stopped(agent, payload, config, printer)
        except ValidationError as exc:
            if not (waiting and is_invalid_resume(exc)):
                raise
            review.invalid_answer(console, exc)  # the same calls wait: ask again
        if not waiting:
            return agent.get_state({"configurable": {"thread_id": thread}}).values
        payload = Command(resume={interrupt.id: answer(interrupt) for interrupt in waiting})


def _until_stopped(agent: Any, payload: Any, config: RunnableConfig, printer: display.StepPrinter) -> list[Interrupt]:
    """Stream the run until it ends or stops at interrupts (approvals), which it returns."""
    waiting: list[Interrupt] = []
    for update in agent.stream(payload, config, stream_mode="updates"):
        for node, values in update.items():
            if node == INTERRUPTS_KEY:
                waiting.extend(values)
            else:
                printer.update(node, values or {})
    return waiting


def _finish(values: dict[str, Any], watch: _Watch, console: Console, quiet: bool) -> int:
    display.final_report(console, values, f"{watch.command} --extra-iterations 10", quiet)
    return EXIT_CODES.get(values.get("finish_reason") or "", 1)


def _run_config(thread: str, settings: dict[str, Any]) -> RunnableConfig:
    metadata = {f"reinloop_{key}": value for key, value in settings.items() if isinstance(value, str)}
    return {"configurable": {"thread_id": thread}, "metadata": metadata}


def _saved_settings(db: _Database, thread: str) -> dict[str, Any]:
    found = db.saver.get_tuple({"configurable": {"thread_id": thread}})
    if found is None:
        raise CommandError(f"unknown thread {thread!r} in {db.location}; 'reinloop run' starts one")
    return {key: found.metadata.get(f"reinloop_{key}") for key in SETTINGS}


# Ctrl-C ------------------------------------------------------------------------------------------------


class _Watch:
    """What a Ctrl-C during `run` or `resume` reports: the thread, the command that continues it (with --db
    when one was given: REINLOOP_DB and the default need none), and its latest checkpoint when this command
    began to run it (`begin`; the report tells whether anything new was saved since)."""

    def __init__(self, thread: str, db: str | None) -> None:
        self.thread, self.db = thread, db
        words = ["reinloop", "resume", thread, *(["--db", database_label(db)] if db else [])]
        self.command = shlex.join(words)
        self.began = False
        self.before: str | None = None

    def begin(self, agent: Any) -> Any:
        """Note where the thread stands as the run begins; its state snapshot."""
        snapshot = agent.get_state({"configurable": {"thread_id": self.thread}})
        self.began, self.before = True, _checkpoint_id(snapshot)
        return snapshot

    def report(self) -> str:
        """What the thread has saved, read back once the run stopped, and how to continue it."""
        from reinloop.graph import agent_topology

        try:
            with _database(self.db, must_exist=True) as db:
                snapshot = agent_topology(db.saver).get_state({"configurable": {"thread_id": self.thread}})
        except CommandError:  # no runs database: the run stopped before it made one
            return NOTHING_SAVED_TEMPLATE.format(thread=self.thread)
        except Exception as exc:  # a database gone or damaged: say so, and where to look
            return UNREAD_TEMPLATE.format(thread=self.thread, error=" ".join(str(exc).split()) or type(exc).__name__)
        if snapshot.metadata is None:
            return NOTHING_SAVED_TEMPLATE.format(thread=self.thread)
        new = self.began and _checkpoint_id(snapshot) != self.before
        step, rounds = snapshot.metadata.get("step"), counted(snapshot.values.get("iteration", 0), "round")
        text = (SAVED_TEMPLATE if new else NOTHING_NEW_TEMPLATE).format(thread=self.thread, step=step, rounds=rounds)
        reason = snapshot.values.get("finish_reason")
        resumable = bool(snapshot.next) or reason not in (None, "answered")
        return text + (CONTINUE_TEMPLATE.format(command=self.command) if resumable else "")


def _checkpoint_id(snapshot: Any) -> str | None:
    """The id of a state snapshot's checkpoint; None for a thread with none."""
    return None if snapshot.metadata is None else str(snapshot.config["configurable"]["checkpoint_id"])


@contextmanager
def _told_on_interrupt(watch: _Watch) -> Iterator[None]:
    """Ctrl-C: once the block has stopped what it started (the model server, the database), end the tool
    workers and report what was saved (`Interrupted`)."""
    from reinloop.tools.execution import stop_workers

    try:
        yield
    except KeyboardInterrupt:
        # Before the report, not at interpreter exit: a worker still running a call has nothing to wait for.
        stop_workers()
        raise Interrupted(watch.report()) from None


# the database and the agent ----------------------------------------------------------------------------


class _Database:
    """The runs database: its checkpointer, where it is as printed (a URL's password hidden), and the SQLite
    file of the long-term memory (beside a runs file; in the user data folder for PostgreSQL).

    An existing database is opened at once, so a bad file or server is refused before a model starts. A new
    SQLite file is only made when its checkpointer is first needed (the agent is built once its model and
    tools are ready): a run that fails to start (a bad model, Ctrl-C while the embedded model starts) leaves
    no empty database behind."""

    def __init__(self, where: str | Path, stack: ExitStack) -> None:
        self.location = database_label(where)
        self.memory_path = (_data_folder() if is_postgres_url(where) else Path(where).parent) / "memory.sqlite"
        self._where, self._stack = where, stack
        self._saver: Any = None

    @property
    def saver(self) -> Any:
        return self.open()

    def open(self) -> Any:
        """The checkpointer, opened (and for a new SQLite file, made) on first use; closed with the block."""
        if self._saver is None:
            self._saver = self._stack.enter_context(open_checkpointer(self._where))
        return self._saver


@contextmanager
def _database(given: str | None, *, must_exist: bool) -> Iterator[_Database]:
    where = given or default_db()
    new = not is_postgres_url(where) and not Path(where).exists()
    if must_exist and new:
        raise CommandError(f"no runs database at {where}; pass --db, or start a run with 'reinloop run'")
    if new:
        _check_creatable(Path(where))
    with ExitStack() as stack:
        db = _Database(where, stack)
        if not new:
            db.open()
        yield db


def _check_creatable(path: Path) -> None:
    """Refuse a new SQLite file's path with a file where a folder must be, before anything starts."""
    if (found := _file_in_the_way(path.parents)) is not None:
        raise CommandError(NEW_DATABASE_TEMPLATE.format(path=path, found=found))


def _file_in_the_way(paths: Iterable[Path]) -> Path | None:
    """The first of `paths` (a path, then the folders above it) that exists, if it is not a folder."""
    found = next((path for path in paths if path.exists()), None)
    return None if found is None or found.is_dir() else found


def _data_folder() -> Path:
    import platformdirs

    return platformdirs.user_data_path("reinloop")


@dataclass(frozen=True)
class _Built:
    """The agent a run uses, its settings (saved with each checkpoint) and its AgentConfig."""

    agent: Any
    settings: dict[str, Any]
    config: Any


@contextmanager
def _agent(args: argparse.Namespace, settings: dict[str, Any], db: _Database) -> Iterator[_Built]:
    from reinloop import build_agent, default_toolset
    from reinloop.models import model_from_settings
    from reinloop.presets import layered_config, preset_protocol

    if settings.get("mcp_config"):
        from reinloop.tools.mcp import load_mcp_config

        load_mcp_config(settings["mcp_config"])  # a bad file is refused before a model starts
    with ExitStack() as stack:
        # The protocol typed, else the preset's, else the model's own (the embedded model has no tool calling).
        protocol = settings["protocol"] or preset_protocol(settings.get("preset"))
        chosen = stack.enter_context(model_from_settings(settings["model"], settings["base_url"], protocol))
        settings = {**settings, "model": chosen.label, "protocol": chosen.protocol}
        # An option left out is None and overrides nothing.
        limits = {key: getattr(args, key) for key in LIMITS if getattr(args, key, None) is not None}
        config = layered_config(settings.get("preset"), chosen, limits)
        workspace = _workspace(settings["workspace"] or "reinloop-workspace")
        tools = default_toolset(workspace, model=chosen.model, weather_base_url=os.environ.get("REINLOOP_WEATHER_URL"))
        tools += _mcp_tools(stack, settings, config.tool_timeout_s)
        store = None if getattr(args, "no_memory", False) else _memory_store(stack, db.memory_path)
        approve = settings["approve"].split(",") if settings.get("approve") else DEFAULT_APPROVALS
        agent = build_agent(chosen.model, tools, config=config, checkpointer=db.saver, store=store,
                            protocol=chosen.decision_protocol, approve=approve)  # fmt: skip
        yield _Built(agent, settings, config)


def _mcp_tools(stack: ExitStack, settings: dict[str, Any], tool_timeout_s: float) -> list[BaseTool]:
    """The tools of the MCP servers in the settings' config file (none without one), their servers running
    until `stack` closes."""
    if not settings.get("mcp_config"):
        return []
    from reinloop.tools.mcp import open_mcp_tools

    return list(open_mcp_tools(stack, settings["mcp_config"], tool_name_prefix=bool(settings.get("mcp_prefix")),
                               tool_timeout_s=tool_timeout_s))  # fmt: skip


def _workspace(given: str | Path) -> Path:
    """The folder the tools work in, checked: neither it nor a folder above it may be a file."""
    workspace = Path(given)
    if (found := _file_in_the_way([workspace, *workspace.parents])) is not None:
        raise CommandError(WORKSPACE_TEMPLATE.format(workspace=workspace, file=found))
    return workspace


def _memory_store(stack: ExitStack, path: Path) -> Any:
    try:
        from reinloop.memory import sqlite_memory_store

        store = sqlite_memory_store(path)
    except (ImportError, ReinloopError):
        return None  # the memory extra is not installed: summaries still work, recall does not
    except _sqlite_errors() as exc:
        raise CommandError(MEMORY_TEMPLATE.format(path=path, reason=exc)) from exc
    stack.callback(store.conn.close)
    return store


def _sqlite_errors() -> tuple[type[Exception], ...]:
    """sqlite3's errors, and pysqlite3's: the memory store opens its file with pysqlite3 where this Python's
    sqlite3 cannot load extensions."""
    try:
        import pysqlite3.dbapi2
    except ImportError:
        return (sqlite3.Error,)
    return sqlite3.Error, pysqlite3.dbapi2.Error


# inspection ---------------------------------------------------------------------------------------------


def tools(args: argparse.Namespace, console: Console) -> int:
    from reinloop.config import AgentConfig
    from reinloop.testing import ScriptedChatModel
    from reinloop.tools import ToolRegistry, default_toolset

    settings = {"mcp_config": args.mcp_config, "mcp_prefix": args.mcp_prefix}
    with ExitStack() as stack:
        # A run's toolset has translate, with the run's model: a model that is never called stands in for it.
        toolset = default_toolset(_workspace(args.workspace), model=ScriptedChatModel(),
                                  weather_base_url=os.environ.get("REINLOOP_WEATHER_URL"))  # fmt: skip
        toolset += _mcp_tools(stack, settings, AgentConfig().tool_timeout_s)
        rows = [(entry.signature, _source(entry.tool)) for entry in ToolRegistry(toolset)]
    display.tool_table(console, rows)
    return 0


def _source(tool: BaseTool) -> str:
    from reinloop.tools.mcp import MCPTool

    return f"MCP server {tool.server}" if isinstance(tool, MCPTool) else "built-in"


def history(args: argparse.Namespace, console: Console) -> int:
    from reinloop.graph import agent_topology
    from reinloop.prune import marks

    with _database(args.db, must_exist=True) as db:
        config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
        snapshots = list(agent_topology(db.saver).get_state_history(config))
        if not snapshots:
            raise CommandError(f"unknown thread {args.thread!r} in {db.location}")
        labels = {found.checkpoint_id: found.label or "marked" for found in marks(db.saver, args.thread)}
        display.history_table(console, args.thread, snapshots, labels)
    return 0


def show(args: argparse.Namespace, console: Console) -> int:
    from reinloop.graph import agent_topology

    with _database(args.db, must_exist=True) as db:
        snapshot = agent_topology(db.saver).get_state({"configurable": {"thread_id": args.thread}})
        if not snapshot.values:
            raise CommandError(f"unknown thread {args.thread!r} in {db.location}")
        if args.json:
            display.state_json(console, snapshot.values)
        else:
            display.thread_state(console, args.thread, snapshot)
    return 0


# a bounded database ------------------------------------------------------------------------------------


def prune(args: argparse.Namespace, console: Console) -> int:
    from reinloop.prune import prune as prune_database

    if args.keep < 1:
        raise CommandError("--keep must be at least 1: the latest checkpoint is what resumes a thread")
    if args.keep_ids and not args.threads:
        raise CommandError("--keep-id needs the thread of the checkpoint: give it with --thread")
    with _database(args.db, must_exist=True) as db:
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
    from reinloop.prune import mark as mark_checkpoint
    from reinloop.prune import unmark

    if args.remove and args.checkpoint is None:
        raise CommandError("--remove needs the marked checkpoint: give it with --checkpoint")
    with _database(args.db, must_exist=True) as db:
        ids = _checkpoint_ids(db, args.thread)
        chosen = _resolved(args.checkpoint, ids) if args.checkpoint else ids[0]
        config: RunnableConfig = {"configurable": {"thread_id": args.thread, "checkpoint_id": chosen}}
        if args.remove:
            display.unmarked(console, args.thread, chosen, unmark(db.saver, config))
        else:
            display.marked(console, args.thread, mark_checkpoint(db.saver, config, args.label), args.label)
    return 0


def _checkpoint_ids(db: _Database, thread: str) -> list[str]:
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


def evaluate(args: argparse.Namespace, console: Console) -> int:
    from reinloop.eval import run_benchmark

    profile = _fault_profile(args)
    if args.protocol and not _real_model(args):
        raise CommandError(
            "--protocol is a real model's (--model, --base-url or --local); the simulated one writes each agent's"
        )
    if args.presets and (_real_model(args) or args.grid):
        raise CommandError(
            "--presets runs the simulated model on one profile: leave out --model, --base-url, --local and --grid"
        )
    if args.grid:
        return _grid(args, profile, console)
    with _progress_bar(console) as advance:

        def after_run(done: int, total: int, agent: str, task: str) -> None:
            advance(done, total, f"{agent}: {task}")

        result = run_benchmark(profile, seed=args.seed, tasks=args.tasks, out=args.out, model=args.model,
                               base_url=args.base_url, local=args.local, protocol=args.protocol,
                               presets=args.presets, progress=after_run)  # fmt: skip
    display.benchmark_report(console, result)
    return 0


def _grid(args: argparse.Namespace, profile: Any, console: Console) -> int:
    from reinloop.eval import GridSpec, run_grid

    if _real_model(args):
        raise CommandError("--grid runs the simulated model: leave out --model, --base-url and --local")
    _check_rates("--fault-rates", args.fault_rates)
    _check_rates("--correct-rates", args.correct_rates)
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    spec = GridSpec(fault_rates=tuple(args.fault_rates), correct_rates=tuple(args.correct_rates),
                    seeds=tuple(args.seeds), tasks=args.tasks, base=profile)  # fmt: skip
    with _progress_bar(console) as advance:
        result = run_grid(spec, out=args.out, workers=args.workers,
                          progress=lambda done, total: advance(done, total, "fault grid"))  # fmt: skip
    display.benchmark_report(console, result)
    return 0


def _real_model(args: argparse.Namespace) -> bool:
    """Whether `eval` runs a real model (--model, --base-url or --local) instead of the simulated one."""
    return bool(args.model or args.base_url or args.local)


def _fault_profile(args: argparse.Namespace) -> Any:
    """The simulated model's faults from the command line, checked."""
    from reinloop.eval import SUITE, FaultProfile

    for name in RATES:
        _check_rates(f"--{name.replace('_', '-')}", [getattr(args, name)])
    if not 1 <= args.tasks <= len(SUITE):
        raise CommandError(f"--tasks must be between 1 and {len(SUITE)}")
    if args.runaway_rounds is not None and args.runaway_rounds < 1:
        raise CommandError("--runaway-rounds must be at least 1")
    rates = {name: getattr(args, name) for name in RATES}
    return FaultProfile(**rates, latency_s=args.latency, runaway_rounds=args.runaway_rounds)


def _check_rates(option: str, rates: list[float]) -> None:
    if not all(0 <= rate <= 1 for rate in rates):
        raise CommandError(f"{option} must be between 0 and 1")


@contextmanager
def _progress_bar(console: Console) -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar for the benchmark: yields `advance(done, total, description)`."""
    from rich.markup import escape
    from rich.progress import Progress

    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("evaluating", total=None)

        def advance(done: int, total: int, description: str) -> None:
            progress.update(bar, completed=done, total=total, description=escape(description))

        yield advance
