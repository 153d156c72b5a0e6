"""The MCP servers' sessions, kept open on a private event loop for the length of a `with` block
(`MCPTools`), and the servers' tools, which call through them (`MCPTool`).

Why not the adapters' tools as they are: they are async only, and each call opens a new session (for a stdio
server, a new process) unless it is given a session, which is then bound to the event loop it was opened on;
and an MCP session is an anyio task group, which only the task that entered it may exit. So `MCPTools` runs
a private event loop in a daemon thread, where each server has a long-lived task of its own that opens its
session, loads its tools, waits for the block to end, then closes the session. A task per server, not one
for all: a server whose pipe breaks makes mcp fail its session's task group, which would end every session
the task holds. Each tool is an `MCPTool` that hands its call to that loop
(`asyncio.run_coroutine_threadsafe`) and waits for it: blocking under `invoke`, from any thread (reinloop's
tool threads included), or without blocking under `ainvoke`, from any other event loop. One server process
answers every call, and calls may overlap.

Failures are bounded: a server that does not start (a bad command, one that exits at once, one that never
answers) is a `ConfigurationError` naming it within `start_timeout_s` (and the few seconds mcp gives a
server to exit); a call waits at most `call_timeout_s`, and a call to a server that died fails at once,
with an exception (an error observation in reinloop), while the other servers' tools go on working.
Closing is quiet, also when a server has died.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import PrivateAttr

from reinloop.errors import ConfigurationError
from reinloop.tools.mcp_config import load_mcp_config
from reinloop.tools.results import describe_error
from reinloop.tools.timeouts import wait_problem

if TYPE_CHECKING:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.sessions import Connection

# How long one server may take to start and list its tools: a cold `uvx` or `npx` may first download it.
DEFAULT_START_TIMEOUT_S = 30.0
# The longest a call waits for its server: a backstop for callers without a timeout of their own. Under
# reinloop, whose tool timeout (30 s by default) decides first, it frees the calls a run abandoned.
DEFAULT_CALL_TIMEOUT_S = 300.0
# How long closing may take per server: mcp gives a stdio server 2 s to exit once its input is closed, then
# terminates it and kills it 2 s later.
CLOSE_TIMEOUT_S = 5.0
MISSING_EXTRA = "MCP tools need the mcp extra: pip install 'reinloop[mcp]' ({error})"


class MCPTool(BaseTool):
    """A tool of an MCP server, called on the session its `MCPTools` keeps open.

    It has the adapters' tool's name, description, JSON-schema `args_schema`, metadata (the MCP tool
    annotations), ``response_format="content_and_artifact"`` and error handling (an MCP error result is
    returned as error content by `handle_tool_error`); `server` names its server. Works under `invoke` from
    any thread and under `ainvoke` from any event loop.
    """

    server: str
    _owner: MCPTools = PrivateAttr()
    # The adapters' call of this tool on the open session: a coroutine function of the tool's arguments.
    _coroutine: Callable[..., Awaitable[Any]] = PrivateAttr()

    def _run(self, *args: Any, **arguments: Any) -> Any:
        return self._owner._call_waiting(self, arguments)

    async def _arun(self, *args: Any, **arguments: Any) -> Any:
        return await self._owner._call_awaited(self, arguments)


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
    own tools down: their calls raise `ConnectionError`, and the other servers' tools go on working.
    """

    def __init__(
        self,
        config: str | Path | Mapping[str, Connection],
        *,
        tool_name_prefix: bool = False,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        for setting, seconds in (("start_timeout_s", start_timeout_s), ("call_timeout_s", call_timeout_s)):
            problem = "must be positive" if seconds <= 0 else wait_problem(seconds)
            if problem:
                raise ConfigurationError(f"{setting} {problem}, got {seconds!r}")
        if isinstance(config, str | Path):
            self._connections, self._source = load_mcp_config(config), f"the MCP config {config}"
        else:
            self._connections, self._source = dict(config), "the MCP connections"
        self._prefix = tool_name_prefix
        self._start_timeout_s, self._call_timeout_s = start_timeout_s, call_timeout_s
        self.tools: list[MCPTool] = []
        # The private loop's state, read by callers' threads under the lock: `_loop` and `_task` (the serving
        # task) while the loop runs, cleared before it closes; `_stop` once the tools are handed over and
        # until the block ends; `_live` the servers whose sessions are open.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._live: set[str] = set()
        # The calls running on the private loop, by server (touched only there): a session that ends cancels
        # its own, which mcp may leave waiting for ever when the server's pipe breaks.
        self._running: dict[str, set[asyncio.Task[Any]]] = {server: set() for server in self._connections}
        self._thread: threading.Thread | None = None

    def __enter__(self) -> list[MCPTool]:
        if self._thread is not None:
            raise RuntimeError("this MCPTools has been opened already; make another one for another block")
        try:
            from langchain_mcp_adapters.client import MultiServerMCPClient
        except ImportError as exc:
            raise ConfigurationError(MISSING_EXTRA.format(error=exc)) from None
        client = MultiServerMCPClient(self._connections, tool_name_prefix=self._prefix)
        ready: concurrent.futures.Future[list[MCPTool]] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run_loop, args=(client, ready), name="reinloop-mcp", daemon=True)
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

    def _run_loop(self, client: MultiServerMCPClient, ready: concurrent.futures.Future[list[MCPTool]]) -> None:
        """The private thread: its event loop lives as long as the serving task (asyncio.run then cancels what
        calls are left and closes the loop)."""
        with contextlib.suppress(asyncio.CancelledError):  # the start was cancelled, and `ready` says so
            asyncio.run(self._serve(client, ready))

    async def _serve(self, client: MultiServerMCPClient, ready: concurrent.futures.Future[list[MCPTool]]) -> None:
        """Start every server in a task of its own, hand over their tools once all have started, then wait
        for the end of the block and for the sessions to close."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._loop, self._task = loop, asyncio.current_task()
        stop = asyncio.Event()
        starts: dict[str, asyncio.Future[list[BaseTool] | ConfigurationError]] = {
            server: loop.create_future() for server in self._connections
        }
        sessions = {
            server: asyncio.create_task(self._session(client, server, start, stop)) for server, start in starts.items()
        }
        try:
            try:
                tools = await self._started(starts)
            except BaseException as exc:  # a server did not start, two share a tool name, or Ctrl-C
                ready.set_exception(exc)
                stop.set()
                cancelled = isinstance(exc, asyncio.CancelledError)
                # The servers still starting finish (within their start timeout) and close as usual: one
                # cancelled while its process is being spawned leaves it and its pipes to the garbage
                # collector. Only Ctrl-C stops them at once.
                for server, start in starts.items():
                    if cancelled and not start.done():
                        sessions[server].cancel()
                await asyncio.gather(*sessions.values(), return_exceptions=True)
                if cancelled:
                    raise
                return
            with self._lock:
                self._stop = stop
            ready.set_result(tools)
            # Until the block ends, even when every server has died: their calls then say so.
            await stop.wait()
            await asyncio.gather(*sessions.values())
        finally:
            with self._lock:
                self._loop, self._task, self._stop = None, None, None

    async def _started(
        self, starts: Mapping[str, asyncio.Future[list[BaseTool] | ConfigurationError]]
    ) -> list[MCPTool]:
        """The servers' tools once every server has started; the first server's failure as soon as it fails."""
        pending: set[asyncio.Future[Any]] = set(starts.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for start in done:
                if isinstance(failure := start.result(), ConfigurationError):
                    raise failure
        tools: list[MCPTool] = []
        owners: dict[str, str] = {}
        for server, start in starts.items():
            for tool in cast("list[BaseTool]", start.result()):
                if tool.name in owners:
                    raise ConfigurationError(
                        f"MCP servers {owners[tool.name]!r} and {server!r} both have a tool named {tool.name!r}: "
                        f"prefix each tool's name with its server's (MCPTools(..., tool_name_prefix=True); "
                        f"reinloop --mcp-prefix), or leave one of the servers out of {self._source}"
                    )
                owners[tool.name] = server
                tools.append(self._wrap(tool, server))
        return tools

    async def _session(
        self,
        client: MultiServerMCPClient,
        server: str,
        start: asyncio.Future[list[BaseTool] | ConfigurationError],
        stop: asyncio.Event,
    ) -> None:
        """One server's life, in a task of its own, which enters and exits its session (an anyio task group
        must be): start it within the start timeout and load its tools (`start` says how it went), keep the
        session until `stop`, close it. A server that dies ends only this task."""
        from langchain_mcp_adapters.tools import load_mcp_tools

        try:
            async with AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self._start_timeout_s) as deadline:
                        session = await stack.enter_async_context(client.session(server))
                        tools = await load_mcp_tools(
                            session, callbacks=client.callbacks, server_name=server, tool_name_prefix=self._prefix
                        )
                except Exception as exc:
                    start.set_result(
                        ConfigurationError(
                            f"MCP server {server!r} of {self._source} did not start: {self._why(exc, deadline)}"
                        )
                    )
                    return
                with self._lock:
                    self._live.add(server)
                start.set_result(tools)
                await stop.wait()
        except asyncio.CancelledError:
            start.cancel()  # a no-op once started
            raise
        except Exception:
            # The server died and its transport broke (mcp raises the broken pipe into the session's task group,
            # which ends this task): its process is reaped all the same, and its calls now say it is gone.
            pass
        finally:
            with self._lock:
                self._live.discard(server)
            for call in self._running[server]:
                call.cancel()

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
        # load_mcp_tools makes StructuredTools whose coroutine calls the MCP tool on the session.
        coroutine = tool.coroutine if isinstance(tool, StructuredTool) else None
        if coroutine is None:
            raise TypeError(f"langchain-mcp-adapters made {tool.name!r} without a coroutine: an unsupported version")
        wrapped = MCPTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            metadata=tool.metadata,
            response_format=tool.response_format,
            handle_tool_error=tool.handle_tool_error,
            server=server,
        )
        wrapped._owner, wrapped._coroutine = self, coroutine
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
            if tool.server not in self._live:
                raise ConnectionError(self._gone(tool))
            return asyncio.run_coroutine_threadsafe(self._call_on_loop(tool, arguments), self._loop)

    async def _call_on_loop(self, tool: MCPTool, arguments: dict[str, Any]) -> Any:
        # Imported here: mcp is an optional extra (anyio comes with it).
        import anyio
        from mcp.shared.exceptions import McpError
        from mcp.types import CONNECTION_CLOSED

        running, this = self._running[tool.server], cast("asyncio.Task[Any]", asyncio.current_task())
        running.add(this)
        try:
            return await tool._coroutine(**arguments)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ConnectionError(self._gone(tool)) from exc
        except McpError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise
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


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception an anyio task group's ExceptionGroup holds: what actually went wrong."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
