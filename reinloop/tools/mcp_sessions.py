"""The MCP servers' sessions, kept open on a private event loop for the length of a `with` block
(`MCPTools`), and the servers' tools, which call through them (`MCPTool`): blocking under `invoke`, from any
thread, or without blocking under `ainvoke`, from any other event loop. Calls may overlap.

Failures are bounded: a server that does not start is a `ConfigurationError` naming it within
`start_timeout_s`; a call waits at most `call_timeout_s`; a server that died is started again at its next
call (`max_restarts` times a block, after a backoff), and a call it may have run is never sent again. Lines of
a server's stdout that are not JSON-RPC are logged once per server; closing is quiet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import PrivateAttr, ValidationError

from reinloop.errors import ConfigurationError
from reinloop.text import counted
from reinloop.tools.mcp_config import load_mcp_config
from reinloop.tools.results import describe_error
from reinloop.tools.timeouts import wait_problem

if TYPE_CHECKING:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.sessions import Connection

logger = logging.getLogger(__name__)

# How long one server may take to start and list its tools: a cold `uvx` or `npx` may first download it.
DEFAULT_START_TIMEOUT_S = 30.0
# The longest a call waits for its server: a backstop for callers without a timeout of their own. Under
# reinloop, whose tool timeout (30 s by default) decides first, it frees the calls a run abandoned.
DEFAULT_CALL_TIMEOUT_S = 300.0
# How often a server that died is started again in one block; after that its calls fail at once and the
# agent's tool circuit and error streak stop the model from calling it.
DEFAULT_MAX_RESTARTS = 3
# The n-th restart of a server comes this many seconds times 2**(n - 1) after its last death (or failed start):
# 0.5, 1 and 2 s, within the default tool timeout of 30 s, which the call waiting for it counts against.
DEFAULT_RESTART_BACKOFF_S = 0.5
# How long closing may take per server: mcp gives a stdio server 2 s to exit once its input is closed, then
# terminates it and kills it 2 s later.
CLOSE_TIMEOUT_S = 5.0
MISSING_EXTRA = "MCP tools need the mcp extra: pip install 'reinloop[mcp]' ({error})"
RESTARTS_SPENT_TEMPLATE = (
    "MCP server {server!r} died and is not started again: it was started again {restarts} in this block "
    "already (max_restarts={most}); this call was not sent"
)
RESTART_FAILED_TEMPLATE = "MCP server {server!r} died and did not start again: {why}; this call was not sent"
GONE_TOOL_TEMPLATE = "MCP server {server!r} no longer offers {name!r}: it has changed its tools since it was restarted"
JUNK_TEMPLATE = (
    "MCP server %r wrote a line to its stdout that is not a JSON-RPC message; it is ignored, as are any later "
    "ones (not reported again): %s"
)


def now() -> float:
    """The clock that times restarts; tests replace it."""
    return time.monotonic()


async def apause(seconds: float) -> None:
    """How a restart waits out its backoff; tests replace it to see the waits without sleeping."""
    await asyncio.sleep(seconds)


# One of the adapters' tool calls on a session: a coroutine function of the tool's arguments.
Call = Callable[..., Awaitable[Any]]


class MCPTool(BaseTool):
    """A tool of an MCP server, called on the session its `MCPTools` keeps open for the server.

    It has the adapters' tool's name, description, JSON-schema `args_schema`, metadata (the MCP tool
    annotations), ``response_format="content_and_artifact"`` and error handling (an MCP error result is
    returned as error content by `handle_tool_error`); `server` names its server. Works under `invoke` from
    any thread and under `ainvoke` from any event loop.
    """

    server: str
    _owner: MCPTools = PrivateAttr()

    def _run(self, *args: Any, **arguments: Any) -> Any:
        return self._owner._call_waiting(self, arguments)

    async def _arun(self, *args: Any, **arguments: Any) -> Any:
        return await self._owner._call_awaited(self, arguments)


@dataclass(eq=False)
class _Session:
    """One session of a server (for a stdio server, one process), on the private loop."""

    # Its start: the server's tools, or why it did not start.
    started: asyncio.Future[list[BaseTool] | str]
    task: asyncio.Task[None] | None = None
    # The adapters' calls of the server's tools on this session, by tool name, once it has started.
    calls: dict[str, Call] = field(default_factory=dict)
    # Set to close it: the block ended, or its server died.
    close: asyncio.Event = field(default_factory=asyncio.Event)
    # The calls running on it: cancelled when it ends, since mcp may leave them waiting for ever when the pipe
    # breaks.
    running: set[asyncio.Task[Any]] = field(default_factory=set)


@dataclass(eq=False)
class _Server:
    """A server over the block, on the private loop: its session and its restarts."""

    name: str
    # The session its calls go to: None once it is known to have died, until a restart opens another.
    session: _Session | None = None
    # How many times it was started again, and when (`now()`) its last session died or a restart failed.
    restarts: int = 0
    died_at: float = 0.0
    # The restart under way, which every call arriving meanwhile waits for: the new session, or why not.
    restarting: asyncio.Task[_Session | str] | None = None
    # Whether the junk on its stdout has been reported (once a block).
    junk_reported: bool = False


class _Unsent(Exception):
    """The call was not sent: the session's connection had closed."""


# The server whose session the current task serves: mcp's stdout reader, a task of the session's, inherits it.
_SERVING: ContextVar[_Server | None] = ContextVar("reinloop_mcp_serving", default=None)


class _QuietJunk(logging.Filter):
    """Drops mcp's record, with its traceback, of a line of a server's stdout that is not JSON-RPC (mcp ignores
    the line), and logs one line instead, once per server. Records of sessions that are not ours pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        server = _SERVING.get()
        if server is None or not record.exc_info or not isinstance(record.exc_info[1], ValidationError):
            return True
        if not server.junk_reported:
            server.junk_reported = True
            logger.warning(JUNK_TEMPLATE, server.name, _junk_line(record.exc_info[1]))
        return False


_QUIET_JUNK = _QuietJunk()


def _junk_line(exc: ValidationError) -> str:
    """The start of the line that was not JSON-RPC, as pydantic saw it."""
    errors = exc.errors()
    line = errors[0].get("input") if errors else None
    return repr(line[:80]) if isinstance(line, str) else "(unreadable)"


class MCPTools:
    """The tools of the MCP servers in `config` (a config file's path, or connections by server name), each
    server running, with one session, for the length of a `with` block, which yields the tools:

        with MCPTools("mcp.json") as tools:
            agent = build_agent(model, [*default_toolset("workspace"), *tools])
            agent.invoke({"task": "What time is it in Tokyo?"})

    Two servers' tools may not share a name (`ConfigurationError`, naming both) unless `tool_name_prefix`
    names each tool after its server (``time_get_current_time``). Entering fails with a `ConfigurationError`
    naming a server that does not start within `start_timeout_s` seconds; a call waits for its server at most
    `call_timeout_s` seconds, then is cancelled and raises `TimeoutError`. A server that dies takes only its
    own tools down: a call in flight raises `ConnectionError`; the next call starts the server again, after
    `restart_backoff_s` doubling from its last death, at most `max_restarts` times a block; past that, or when
    it does not start, calls raise `ConnectionRefusedError` (not sent).

    Why not the adapters' tools as they are: they are async only, and each call opens a new session (for a
    stdio server, a new process) unless it is given a session, which is then bound to the event loop it was
    opened on; and an MCP session is an anyio task group, which only the task that entered it may exit. So
    this class runs a private event loop in a daemon thread, where each session has a task of its own that
    opens it, loads its server's tools, waits until it is closed, then closes it. Each tool is an `MCPTool`
    that hands its call to that loop (`asyncio.run_coroutine_threadsafe`) and waits for it.
    """

    def __init__(
        self,
        config: str | Path | Mapping[str, Connection],
        *,
        tool_name_prefix: bool = False,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        restart_backoff_s: float = DEFAULT_RESTART_BACKOFF_S,
    ) -> None:
        _check_settings(start_timeout_s, call_timeout_s, max_restarts, restart_backoff_s)
        if isinstance(config, str | Path):
            self._connections, self._source = load_mcp_config(config), f"the MCP config {config}"
        else:
            self._connections, self._source = dict(config), "the MCP connections"
        self._prefix = tool_name_prefix
        self._start_timeout_s, self._call_timeout_s = start_timeout_s, call_timeout_s
        self._max_restarts, self._restart_backoff_s = max_restarts, restart_backoff_s
        self.tools: list[MCPTool] = []
        # The private loop's state, read by callers' threads under the lock: `_loop` and `_task` (the serving
        # task) while the loop runs, cleared before it closes; `_stop` once the tools are handed over and
        # until the block ends.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        # Touched only on the private loop: the servers, every session not yet ended (closing waits for them),
        # and whether the block is closing (no session starts any more).
        self._servers = {server: _Server(server) for server in self._connections}
        self._sessions: set[_Session] = set()
        self._closing = False
        self._client: MultiServerMCPClient | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> list[MCPTool]:
        if self._thread is not None:
            raise RuntimeError("this MCPTools has been opened already; make another one for another block")
        try:
            from langchain_mcp_adapters.client import MultiServerMCPClient
            from mcp.client import stdio
        except ImportError as exc:
            raise ConfigurationError(MISSING_EXTRA.format(error=exc)) from None
        # mcp logs each line that is not JSON-RPC with a traceback, from the module's logger.
        logging.getLogger(stdio.__name__).addFilter(_QUIET_JUNK)
        self._client = MultiServerMCPClient(self._connections, tool_name_prefix=self._prefix)
        ready: concurrent.futures.Future[list[MCPTool]] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run_loop, args=(ready,), name="reinloop-mcp", daemon=True)
        self._thread.start()
        try:
            self.tools = ready.result()
        except BaseException:
            if ready.done():  # a server did not start: the loop closes the others, then ends
                self._thread.join(self._start_timeout_s + CLOSE_TIMEOUT_S * len(self._connections))
            else:  # Ctrl-C while the servers start
                self.__exit__(None, None, None)
            raise
        return self.tools

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with self._lock:
            stop, self._stop = self._stop, None  # no call is handed over from now on
            if self._loop is not None and stop is not None:
                self._loop.call_soon_threadsafe(stop.set)
            elif self._loop is not None and self._task is not None:  # still starting
                self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            # Bounded: a daemon thread that outlives it ends with the process.
            self._thread.join(CLOSE_TIMEOUT_S * len(self._connections))

    def _run_loop(self, ready: concurrent.futures.Future[list[MCPTool]]) -> None:
        """The private thread: its event loop lives as long as the serving task (asyncio.run then cancels what
        calls are left and closes the loop)."""
        with contextlib.suppress(asyncio.CancelledError):  # the start was cancelled, and `ready` says so
            asyncio.run(self._serve(ready))

    async def _serve(self, ready: concurrent.futures.Future[list[MCPTool]]) -> None:
        """Start every server in a session task of its own, hand over their tools once all have started, then
        wait for the end of the block and for the sessions to close."""
        with self._lock:
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        stop = asyncio.Event()
        firsts = {name: self._open_session(server) for name, server in self._servers.items()}
        try:
            try:
                tools = await self._started(firsts)
            except BaseException as exc:  # a server did not start, two share a tool name, or Ctrl-C
                ready.set_exception(exc)
                cancelled = isinstance(exc, asyncio.CancelledError)
                # The servers still starting finish (within their start timeout) and close as usual: one
                # cancelled while its process is being spawned leaves it and its pipes to the garbage
                # collector. Only Ctrl-C stops them at once.
                for session in firsts.values():
                    if cancelled and not session.started.done() and session.task is not None:
                        session.task.cancel()
                await self._close_sessions()
                if cancelled:
                    raise
                return
            with self._lock:
                self._stop = stop
            ready.set_result(tools)
            # Until the block ends, even when every server has died: their calls then say so.
            await stop.wait()
            await self._close_sessions()
        finally:
            with self._lock:
                self._loop, self._task, self._stop = None, None, None

    async def _close_sessions(self) -> None:
        """Close every session, and wait until they have: restarts under way are dropped, none starts again."""
        self._closing = True
        for server in self._servers.values():
            if server.restarting is not None:
                server.restarting.cancel()
        sessions = list(self._sessions)
        for session in sessions:
            session.close.set()
        await asyncio.gather(*(session.task for session in sessions if session.task), return_exceptions=True)

    async def _started(self, firsts: Mapping[str, _Session]) -> list[MCPTool]:
        """The servers' tools once every server has started; the first server's failure as soon as it fails."""
        pending: set[asyncio.Future[Any]] = {session.started for session in firsts.values()}
        servers = {session.started: name for name, session in firsts.items()}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for start in done:
                if isinstance(why := start.result(), str):
                    raise ConfigurationError(f"MCP server {servers[start]!r} of {self._source} did not start: {why}")
        tools: list[MCPTool] = []
        owners: dict[str, str] = {}
        for server, session in firsts.items():
            for tool in cast("list[BaseTool]", session.started.result()):
                if tool.name in owners:
                    raise ConfigurationError(
                        f"MCP servers {owners[tool.name]!r} and {server!r} both have a tool named {tool.name!r}: "
                        f"prefix each tool's name with its server's (MCPTools(..., tool_name_prefix=True); "
                        f"reinloop --mcp-prefix), or leave one of the servers out of {self._source}"
                    )
                owners[tool.name] = server
                tools.append(self._wrap(tool, server))
        return tools

    def _open_session(self, server: _Server) -> _Session:
        """Start a session of `server` in a task of its own; its `started` says how it went."""
        session = _Session(started=asyncio.get_running_loop().create_future())
        session.task = asyncio.create_task(self._session(server, session))
        self._sessions.add(session)
        session.task.add_done_callback(lambda _: self._sessions.discard(session))
        return session

    async def _session(self, server: _Server, session: _Session) -> None:
        """One session's life, in a task of its own, which enters and exits it (an anyio task group must be):
        start the server within the start timeout and load its tools, become the server's session, keep it
        until it is closed, close it. A server that dies ends only this task."""
        from langchain_mcp_adapters.tools import load_mcp_tools

        assert self._client is not None  # set before the loop starts
        _SERVING.set(server)
        try:
            async with AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self._start_timeout_s) as deadline:
                        opened = await stack.enter_async_context(self._client.session(server.name))
                        tools = await load_mcp_tools(
                            opened,
                            callbacks=self._client.callbacks,
                            server_name=server.name,
                            tool_name_prefix=self._prefix,
                        )
                        session.calls = _calls(tools)
                except Exception as exc:
                    session.started.set_result(self._why(exc, deadline))
                    return
                server.session = session
                session.started.set_result(tools)
                await session.close.wait()
        except asyncio.CancelledError:
            session.started.cancel()  # a no-op once started
            raise
        except Exception:
            # The server died and its transport broke (mcp raises the broken pipe into the session's task group,
            # which ends this task): its process is reaped all the same, and its next call starts it again.
            pass
        finally:
            self._lost(server, session)
            for call in session.running:
                call.cancel()

    def _lost(self, server: _Server, session: _Session) -> None:
        """`session` of `server` has ended or is found dead: it closes, and the next call starts another."""
        if server.session is session:
            server.session, server.died_at = None, now()
        session.close.set()

    def _why(self, exc: Exception, deadline: asyncio.Timeout) -> str:
        """Why a server did not start, in a few words."""
        from mcp.shared.exceptions import McpError
        from mcp.types import CONNECTION_CLOSED

        if deadline.expired():
            return f"it did not answer within {self._start_timeout_s:g} s (start_timeout_s)"
        leaf = _first_leaf(exc)
        if isinstance(leaf, McpError) and leaf.error.code == CONNECTION_CLOSED:
            return "it closed the connection before answering (it may have exited: see its error output)"
        return describe_error(leaf)

    def _wrap(self, tool: BaseTool, server: str) -> MCPTool:
        wrapped = MCPTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            metadata=tool.metadata,
            response_format=tool.response_format,
            handle_tool_error=tool.handle_tool_error,
            server=server,
        )
        wrapped._owner = self
        return wrapped

    # calls ----------------------------------------------------------------------------------------------

    def _call_waiting(self, tool: MCPTool, arguments: dict[str, Any]) -> Any:
        """Run `tool` with `arguments` on its session, waiting in this thread."""
        future = self._submit(tool, arguments)
        try:
            done, _ = concurrent.futures.wait([future], self._call_timeout_s)
        finally:
            future.cancel()  # a no-op once the call is done; else (timeout, Ctrl-C) it is cancelled on the loop
        if not done:
            raise self._timeout(tool)
        if future.cancelled():
            raise self._ended(tool)
        return future.result()

    async def _call_awaited(self, tool: MCPTool, arguments: dict[str, Any]) -> Any:
        """Run `tool` with `arguments` on its session, awaited on the caller's event loop."""
        waiting = asyncio.wrap_future(self._submit(tool, arguments))
        try:
            done, _ = await asyncio.wait([waiting], timeout=self._call_timeout_s)
        finally:
            waiting.cancel()  # as in _call_waiting, and when the caller is cancelled (reinloop's own timeout)
        if not done:
            raise self._timeout(tool)
        if waiting.cancelled():
            raise self._ended(tool)
        return waiting.result()

    def _submit(self, tool: MCPTool, arguments: dict[str, Any]) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._loop is None or self._stop is None:
                raise self._closed(tool)
            return asyncio.run_coroutine_threadsafe(self._call_on_loop(tool, arguments), self._loop)

    async def _call_on_loop(self, tool: MCPTool, arguments: dict[str, Any]) -> Any:
        """Run the call on its server's session, started again first if the server died. Ends: each turn that
        finds the session dead without sending the call makes `_opened` restart the server or refuse."""
        server = self._servers[tool.server]
        while True:
            session = await self._opened(server, tool)
            try:
                return await self._call_on(server, session, tool, arguments)
            except _Unsent:
                self._lost(server, session)

    async def _opened(self, server: _Server, tool: MCPTool) -> _Session:
        """The server's session; if it died, a new one, unless the restarts are spent (`ConnectionRefusedError`)."""
        if server.session is not None:
            return server.session
        if self._closing:
            raise self._closed(tool)
        if server.restarting is None:
            if server.restarts >= self._max_restarts:
                raise ConnectionRefusedError(
                    RESTARTS_SPENT_TEMPLATE.format(
                        server=server.name, restarts=counted(server.restarts, "time"), most=self._max_restarts
                    )
                )
            server.restarting = asyncio.create_task(self._restart(server))
        # Shielded: a caller that stops waiting leaves the restart to finish, for the next call.
        outcome = await asyncio.shield(server.restarting)
        if isinstance(outcome, str):
            raise ConnectionRefusedError(outcome)
        return outcome

    async def _restart(self, server: _Server) -> _Session | str:
        """Start the server again after its backoff: its new session, or why it did not start."""
        try:
            backoff = self._restart_backoff_s * 2**server.restarts
            await apause(max(0.0, server.died_at + backoff - now()))
            server.restarts += 1
            session = self._open_session(server)
            why = await asyncio.shield(session.started)
            if isinstance(why, str):
                server.died_at = now()
                return RESTART_FAILED_TEMPLATE.format(server=server.name, why=why)
            return session
        finally:
            server.restarting = None

    async def _call_on(self, server: _Server, session: _Session, tool: MCPTool, arguments: dict[str, Any]) -> Any:
        # Imported here: mcp is an optional extra (anyio comes with it).
        import anyio
        from mcp.shared.exceptions import McpError
        from mcp.types import CONNECTION_CLOSED

        call = session.calls.get(tool.name)
        if call is None:
            raise ToolException(GONE_TOOL_TEMPLATE.format(server=server.name, name=tool.name))
        running, this = session.running, cast("asyncio.Task[Any]", asyncio.current_task())
        running.add(this)
        try:
            return await call(**arguments)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            # mcp raises these from handing the request to its transport, which closed when the server exited
            # (its output ended): no server saw this call, so it may go to a restarted one.
            raise _Unsent from exc
        except McpError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise
            # The server died during the call, which it may have run: it is not sent again.
            self._lost(server, session)
            raise ConnectionError(self._gone(tool)) from exc
        finally:
            running.discard(this)

    def _ended(self, tool: MCPTool) -> Exception:
        """What a call cancelled on the loop raises: its session ended under it, with the block or alone."""
        with self._lock:
            is_open = self._stop is not None
        return ConnectionError(self._gone(tool)) if is_open else self._closed(tool)

    def _timeout(self, tool: MCPTool) -> TimeoutError:
        return TimeoutError(
            f"MCP server {tool.server!r} gave no answer for {tool.name!r} within {self._call_timeout_s:g} s"
        )

    @staticmethod
    def _closed(tool: MCPTool) -> RuntimeError:
        return RuntimeError(
            f"the session of MCP server {tool.server!r} is closed: its tools can be called only inside the "
            "MCPTools block that opened it"
        )

    @staticmethod
    def _gone(tool: MCPTool) -> str:
        return f"the connection to MCP server {tool.server!r} is closed (the server may have exited)"


def _check_settings(start_timeout_s: float, call_timeout_s: float, max_restarts: int, restart_backoff_s: float) -> None:
    for setting, seconds in (("start_timeout_s", start_timeout_s), ("call_timeout_s", call_timeout_s)):
        problem = "must be positive" if seconds <= 0 else wait_problem(seconds)
        if problem:
            raise ConfigurationError(f"{setting} {problem}, got {seconds!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ConfigurationError(f"max_restarts must be a whole number >= 0, got {max_restarts!r}")
    problem = "must be >= 0" if not restart_backoff_s >= 0 else wait_problem(restart_backoff_s)
    if problem:
        raise ConfigurationError(f"restart_backoff_s {problem}, got {restart_backoff_s!r}")


def _calls(tools: list[BaseTool]) -> dict[str, Call]:
    """The adapters' call of each tool on its session, by name."""
    # load_mcp_tools makes StructuredTools whose coroutine calls the MCP tool on the session.
    calls = {tool.name: tool.coroutine for tool in tools if isinstance(tool, StructuredTool) and tool.coroutine}
    if missing := [tool.name for tool in tools if tool.name not in calls]:
        raise TypeError(f"langchain-mcp-adapters made {missing[0]!r} without a coroutine: an unsupported version")
    return calls


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception an anyio task group's ExceptionGroup holds: what actually went wrong."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
