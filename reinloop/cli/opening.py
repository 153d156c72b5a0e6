"""What the commands open: the runs database (`_database`: its checkpointer, opened or made, and the long-term
memory's file beside it), and for `run` and `resume` the agent (`_agent`: its model, workspace, tools, MCP
servers and memory store), each closed when the command's block ends."""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reinloop.checkpoint import database_label, is_postgres_url, open_checkpointer
from reinloop.cli import CommandError
from reinloop.errors import ReinloopError

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["DEFAULT_APPROVALS", "LIMITS", "default_db"]

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
)

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
