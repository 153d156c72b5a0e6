"""Saved runs, as the `reinloop` command and its web page (`reinloop inspect`) use them: the runs database
(`open_runs`: its checkpointer, opened or made, and the long-term memory's file beside it), the settings a
thread saved (`saved_settings`), the agent they rebuild (`open_agent`: its model, workspace, tools, MCP servers
and memory store), what a run or resume of a thread is given (`RunOptions`), and running it to its end or its
approvals (`drive`, `continue_run`), told step by step to a `RunReport`; each opened thing closed when its block
ends. A problem the user fixes is a `RunsError`."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt

from reinloop.checkpoint import database_label, is_postgres_url, open_checkpointer
from reinloop.config import MAX_ITERATIONS
from reinloop.errors import ReinloopError
from reinloop.text import truncate

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool
    from pydantic import ValidationError

__all__ = [
    "DEFAULT_APPROVALS",
    "INTERRUPTS_KEY",
    "LIMITS",
    "SETTINGS",
    "Answer",
    "Built",
    "RunOptions",
    "RunReport",
    "RunsDatabase",
    "RunsError",
    "build_run_agent",
    "check_rounds",
    "continue_run",
    "default_db",
    "drive",
    "mcp_tools",
    "open_agent",
    "open_runs",
    "run_config",
    "saved_settings",
    "workspace_folder",
]


# What answers an approval a run stops at; None leaves the call waiting, saved.
Answer = Callable[[Interrupt], dict[str, Any] | None]


class RunsError(ReinloopError):
    """A problem with the runs database, a thread, the workspace or the memory file that the user fixes: the
    command reports it on one line (exit code 2), the page as a 4xx."""


# Run settings saved with each checkpoint (never keys), so a resume rebuilds the same agent: with the MCP
# config's path, not its content (its env may hold secrets), so a resumed run starts the same servers.
SETTINGS = ("model", "base_url", "workspace", "protocol", "approve", "preset", "mcp_config", "mcp_prefix")

# The key of a `stream_mode="updates"` chunk holding the interrupts a run stopped at (LangGraph made its own
# constant for it private).
INTERRUPTS_KEY = "__interrupt__"

# The toolset's tools whose calls wait for the person at the terminal unless --approve names others: those
# that change files and data.
DEFAULT_APPROVALS = ("file_write", "db_insert")

LIMITS = (
    "max_iterations",
    "error_threshold",
    "max_replans",
    "tool_timeout_s",
    "context_token_budget",
    "run_token_budget",
    "max_tools",
    "thread_wait_s",
)  # the AgentConfig fields a run or resume may be given

WORKSPACE_TEMPLATE = "the workspace {workspace} is not a folder ({file} is a file); pass --workspace a folder"
MEMORY_TEMPLATE = (
    "the memory database {path} cannot be opened ({reason}); move it away, or pass --no-memory to run without "
    "long-term memory"
)
NEW_DATABASE_TEMPLATE = "cannot create or open the SQLite database at {path}: {found} is a file, not a folder"


def default_db() -> str | Path:
    """Where runs are saved: REINLOOP_DB (a path or a ``postgresql://`` URL), else the user data folder."""
    if env := os.environ.get("REINLOOP_DB"):
        return env if is_postgres_url(env) else Path(env)
    return _data_folder() / "runs.sqlite"


class RunsDatabase:
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
def open_runs(given: str | None, *, must_exist: bool) -> Iterator[RunsDatabase]:
    where = given or default_db()
    new = not is_postgres_url(where) and not Path(where).exists()
    if must_exist and new:
        raise RunsError(f"no runs database at {where}; pass --db, or start a run with 'reinloop run'")
    if new:
        _check_creatable(Path(where))
    with ExitStack() as stack:
        db = RunsDatabase(where, stack)
        if not new:
            db.open()
        yield db


def _check_creatable(path: Path) -> None:
    """Refuse a new SQLite file's path with a file where a folder must be, before anything starts."""
    if (found := _file_in_the_way(path.parents)) is not None:
        raise RunsError(NEW_DATABASE_TEMPLATE.format(path=path, found=found))


def _file_in_the_way(paths: Iterable[Path]) -> Path | None:
    """The first of `paths` (a path, then the folders above it) that exists, if it is not a folder."""
    found = next((path for path in paths if path.exists()), None)
    return None if found is None or found.is_dir() else found


def _data_folder() -> Path:
    import platformdirs

    return platformdirs.user_data_path("reinloop")


@dataclass(frozen=True)
class Built:
    """The agent a run uses, its settings (saved with each checkpoint) and its AgentConfig."""

    agent: Any
    settings: dict[str, Any]
    config: Any


@contextmanager
def open_agent(
    settings: dict[str, Any], db: RunsDatabase, *, limits: Mapping[str, Any] | None = None, no_memory: bool = False
) -> Iterator[Built]:
    with ExitStack() as stack:
        store = None if no_memory else partial(_memory_store, stack, db.memory_path)
        yield build_run_agent(stack, settings, lambda: db.saver, limits=limits, store=store)


def build_run_agent(
    stack: ExitStack,
    settings: dict[str, Any],
    saver: Callable[[], Any],
    *,
    limits: Mapping[str, Any] | None = None,
    store: Callable[[], Any] | None = None,
    rate_limiter: Any = None,
    ask: bool = True,
) -> Built:
    """The agent of `reinloop run` for `settings`: its model (running until `stack` closes), the preset's and
    the model's config with `limits` over them, the toolset in the settings' workspace and the MCP servers' tools,
    the approvals; saved by the checkpointer `saver()` gives and with the memory store `store()` gives (if any),
    both asked for once the rest is ready. A LangChain `rate_limiter` paces the model's calls; `ask=False` stops
    at no call for approval (a batch with --yes)."""
    from reinloop import build_agent, default_toolset
    from reinloop.models import model_from_settings
    from reinloop.presets import layered_config, preset_protocol

    if settings.get("mcp_config"):
        from reinloop.tools.mcp import load_mcp_config

        load_mcp_config(settings["mcp_config"])  # a bad file is refused before a model starts
    # The protocol typed, else the preset's, else the model's own (the embedded model has no tool calling).
    protocol = settings["protocol"] or preset_protocol(settings.get("preset"))
    chosen = stack.enter_context(model_from_settings(settings["model"], settings["base_url"], protocol))
    settings = {**settings, "model": chosen.label, "protocol": chosen.protocol}
    if rate_limiter is not None:
        chosen.model.rate_limiter = rate_limiter
    # A limit left out is None and overrides nothing.
    given = {key: value for key, value in (limits or {}).items() if value is not None}
    config = layered_config(settings.get("preset"), chosen, given)
    workspace = workspace_folder(settings["workspace"] or "reinloop-workspace")
    tools = default_toolset(workspace, model=chosen.model, weather_base_url=os.environ.get("REINLOOP_WEATHER_URL"))
    tools += mcp_tools(stack, settings, config.tool_timeout_s)
    approve = settings["approve"].split(",") if settings.get("approve") else DEFAULT_APPROVALS
    agent = build_agent(chosen.model, tools, config=config, checkpointer=saver(), store=store and store(),
                        protocol=chosen.decision_protocol, approve=approve if ask else ())  # fmt: skip
    return Built(agent, settings, config)


def mcp_tools(stack: ExitStack, settings: dict[str, Any], tool_timeout_s: float) -> list[BaseTool]:
    """The tools of the MCP servers in the settings' config file (none without one), their servers running
    until `stack` closes."""
    if not settings.get("mcp_config"):
        return []
    from reinloop.tools.mcp import open_mcp_tools

    return list(open_mcp_tools(stack, settings["mcp_config"], tool_name_prefix=bool(settings.get("mcp_prefix")),
                               tool_timeout_s=tool_timeout_s))  # fmt: skip


def workspace_folder(given: str | Path) -> Path:
    """The folder the tools work in, checked: neither it nor a folder above it may be a file."""
    workspace = Path(given)
    if (found := _file_in_the_way([workspace, *workspace.parents])) is not None:
        raise RunsError(WORKSPACE_TEMPLATE.format(workspace=workspace, file=found))
    return workspace


def _memory_store(stack: ExitStack, path: Path) -> Any:
    try:
        from reinloop.memory import sqlite_memory_store

        store = sqlite_memory_store(path)
    except (ImportError, ReinloopError):
        return None  # the memory extra is not installed: summaries still work, recall does not
    except _sqlite_errors() as exc:
        raise RunsError(MEMORY_TEMPLATE.format(path=path, reason=exc)) from exc
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


@dataclass(frozen=True)
class RunOptions:
    """What a run or a resume of a thread is given: the runs database (None: `default_db`), settings that
    override those the thread saved (None keeps each), `limits` (AgentConfig fields among LIMITS; None keeps
    each), and for a resume its extra rounds and hint."""

    thread: str | None = None
    db: str | None = None
    model: str | None = None
    base_url: str | None = None
    workspace: str | None = None
    protocol: str | None = None
    approve: Sequence[str] | None = None
    preset: str | None = None
    mcp_config: str | None = None
    mcp_prefix: bool = False
    limits: Mapping[str, Any] = field(default_factory=dict)
    no_memory: bool = False
    quiet: bool = False
    extra_iterations: int | None = None
    hint: str | None = None

    def settings(self) -> dict[str, Any]:
        """The settings given, as a thread saves them (paths absolute: a resume may run from another folder)."""
        workspace = str(workspace_folder(self.workspace).resolve()) if self.workspace else None
        mcp_config = str(Path(self.mcp_config).resolve()) if self.mcp_config else None
        return {"model": self.model, "base_url": self.base_url, "workspace": workspace, "protocol": self.protocol,
                "approve": ",".join(self.approve) if self.approve else None, "preset": self.preset,
                "mcp_config": mcp_config, "mcp_prefix": "true" if self.mcp_prefix else None}  # fmt: skip


def saved_settings(db: RunsDatabase, thread: str) -> dict[str, Any]:
    """The settings `thread` saved with its latest checkpoint (None for each one it saved none of, as a thread
    run from Python); RunsError for a thread the database does not have."""
    found = db.saver.get_tuple({"configurable": {"thread_id": thread}})
    if found is None:
        raise RunsError(f"unknown thread {thread!r} in {db.location}; 'reinloop run' starts one")
    return {key: found.metadata.get(f"reinloop_{key}") for key in SETTINGS}


def run_config(thread: str, settings: Mapping[str, Any]) -> RunnableConfig:
    """The config a run of `thread` goes with: its settings in the metadata of every checkpoint it saves."""
    metadata = {f"reinloop_{key}": value for key, value in settings.items() if isinstance(value, str)}
    return {"configurable": {"thread_id": thread}, "metadata": metadata}


def check_rounds(text: str) -> int:
    """A count of rounds as `reinloop.resume` takes it: a whole number from 1 to MAX_ITERATIONS; ValueError
    saying so otherwise."""
    try:
        number = int(text)
    except ValueError:  # not a number, or more digits than Python reads
        number = None
    if number is None or not 1 <= number <= MAX_ITERATIONS:
        raise ValueError(
            f"must be a whole number of at least 1 and at most {MAX_ITERATIONS:,} (reinloop.config.MAX_ITERATIONS), "
            f"not {truncate(text, 40)!r}"
        )
    return number


class RunReport(Protocol):
    """What `drive` tells of a run as it goes: `reinloop run` and `resume` print it, the page keeps it as a log."""

    def started(self, saved: Mapping[str, Any]) -> None:
        """The run begins from the thread's saved state `saved`."""

    def step(self, node: str, values: dict[str, Any]) -> None:
        """A node of the run wrote `values`."""

    def refused(self, error: ValidationError) -> None:
        """An approval answer the run refused (an edit failing the tool's schema): the call is asked again."""


def drive(agent: Any, payload: Any, config: RunnableConfig, answer: Answer, report: RunReport) -> dict[str, Any]:
    """Run `agent` from `payload` until the run ends, answering each approval it stops at with `answer`; the
    thread's final state, or its state waiting at the approvals `answer` leaves unanswered (None)."""
    from langgraph.errors import is_invalid_resume
    from pydantic import ValidationError

    thread = {"configurable": {"thread_id": (config.get("configurable") or {})["thread_id"]}}
    report.started(agent.get_state(thread).values)
    waiting: list[Interrupt] = []
    while True:
        try:
            waiting = _until_stopped(agent, payload, config, report)
        except ValidationError as exc:
            if not (waiting and is_invalid_resume(exc)):
                raise
            report.refused(exc)  # the same calls wait: ask again
        answers = {interrupt.id: answer(interrupt) for interrupt in waiting}
        if not waiting or None in answers.values():
            values: dict[str, Any] = agent.get_state(thread).values
            return values
        payload = Command(resume=answers)


def _until_stopped(agent: Any, payload: Any, config: RunnableConfig, report: RunReport) -> list[Interrupt]:
    """Stream the run until it ends or stops at interrupts (approvals), which it returns."""
    waiting: list[Interrupt] = []
    for update in agent.stream(payload, config, stream_mode="updates"):
        for node, values in update.items():
            if node == INTERRUPTS_KEY:
                waiting.extend(values)
            else:
                report.step(node, values or {})
    return waiting


def continue_run(given: RunOptions, answer: Answer, report_for: Callable[[Built], RunReport]) -> dict[str, Any]:
    """Continue the thread `given.thread` as `reinloop resume` does, and return its state once it ends or waits:
    the agent rebuilt from the settings saved with the thread (those `given` overrides), held by this process
    from the read of where it stopped to the end (a second resume waits at most `thread_wait_s`, then fails with
    `ThreadBusyError` having written nothing), a fresh budget after a circuit break (`prepare_resume`), each
    approval answered by `answer`; `report_for(built)`, called once the thread is held, says what to tell."""
    from reinloop.resume import prepare_resume

    if given.thread is None:
        raise ValueError("continue_run needs the thread to continue")
    thread = given.thread
    with open_runs(given.db, must_exist=True) as db:
        saved = saved_settings(db, thread)
        settings = {**saved, **{k: v for k, v in given.settings().items() if v is not None}}
        if given.preset and not given.protocol:
            settings["protocol"] = None  # the new preset's protocol, not the one the run was saved with
        with open_agent(settings, db, limits=given.limits, no_memory=given.no_memory) as built:
            config = run_config(thread, built.settings)
            with built.agent.hold(config):
                report = report_for(built)
                extra = given.extra_iterations
                prepared = prepare_resume(built.agent, config, extra_iterations=extra, hint=given.hint)
                return drive(built.agent, None, prepared, answer, report)
