"""Running one tool call under a hard wall-clock timeout, in a daemon thread or in a worker process.

A thread (the default) runs any tool, sync or async, and receives the run's config (callbacks). A worker
process (opt-in per tool, `isolation="process"`) is for tools that may hold the GIL or end their process: it
is killed at the deadline, and nothing it does reaches the agent's process but text.

`run_tool` waits for the call in the caller's thread; `arun_tool` is the same logic for the event loop
(`reinloop.drivers`): it awaits the thread or the worker without blocking the loop, and awaits an async tool
(`is_async_tool`) on the loop itself, as a task that is cancelled and abandoned at the deadline.

Whatever happens inside a call (a result, an empty result, an exception, `sys.exit()`, a crash, a result
without a text form, a coroutine or generator returned instead of a result, a timeout) comes back as a
`ToolRun`: an error kind and plain text, decided where the tool ran, so the raw value never crosses a process
boundary and nothing is re-raised in the agent. Only LangGraph control flow (`GraphBubbleUp`) and an
interrupt of the caller's own thread pass through. The one raw value kept is a LangGraph `Command` returned
in a thread, which execute_tool judges; a worker process reports one as an error.

One rule says what is an error, whatever the tool's origin (`ResultRules`): the tool raised (a `ToolException`
too, which LangChain would have turned into content for a tool with `handle_tool_error`: reinloop runs such a
tool with the handling off and words the error as the tool's handler does); it returned a ToolMessage with
status "error" (an MCP tool's error result, through langchain-mcp-adapters); or its text is an error by the
tool's own `is_error`. Which failures another attempt may fix is decided here too (`ToolRun.transient`): a
timeout, a crashed worker and an exception are; a ToolException (the tool's message for the model, an MCP
server's refusal), a ToolMessage error, a lazy or unshowable result and an `is_error` text are the model's
to fix. A tool's `retry_on` replaces that rule for the exceptions it raises.
"""

from __future__ import annotations

import _thread
import asyncio
import atexit
import concurrent.futures
import contextvars
import importlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, get_args

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command
from pebble import ProcessExpired, ProcessFuture, ProcessPool

from reinloop.drivers import Steps, adrive, drive, io
from reinloop.state import ErrorKind
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.results import (
    ResultCheck,
    UnshowableResultError,
    content_text,
    describe_error,
    handled_error,
    refuse_lazy,
    reject_empty,
    result_text,
)

if TYPE_CHECKING:
    from reinloop.tools.registry import RegisteredTool

__all__ = [
    "ISOLATIONS",
    "MAX_TIMEOUT_S",
    "POOL_WORKERS",
    "WORKER_WAIT_S",
    "Isolation",
    "ResultRules",
    "RetryOn",
    "ToolExitError",
    "ToolRun",
    "ToolTimeoutError",
    "acall_with_timeout",
    "arun_tool",
    "await_with_timeout",
    "call_with_timeout",
    "invoke_tool",
    "is_async_tool",
    "run_tool",
    "stop_workers",
    "tool_steps",
    "wait_problem",
]

T = TypeVar("T")

# Where a tool call runs: a daemon thread of the agent's process, or a worker process killed at the deadline.
Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)

# Worker processes that run process-isolated calls at once; further calls wait for a free worker, and their
# timeout starts when they start. Each worker is an interpreter with reinloop imported.
POOL_WORKERS = 2
# How long a process-isolated call may wait for a worker before it is reported as a timeout: a cold pool
# starts its workers first (an interpreter importing reinloop: a few seconds), and more parallel calls than
# workers queue. The wait is bounded because an unbounded one could block interpreter exit, which joins
# LangGraph's threads before atexit runs.
WORKER_WAIT_S = 30.0
# The longest timeout of one call. A call in a thread, and a worker's result, are waited for with thread
# locks, which raise OverflowError when the wait starts if it is longer than `threading.TIMEOUT_MAX` (about
# 292 years on 64-bit Linux); asyncio and pebble take any float. A worker's result is waited for WORKER_WAIT_S
# longer than its call's timeout.
MAX_TIMEOUT_S = threading.TIMEOUT_MAX - WORKER_WAIT_S
# Why a wait setting is refused when the agent is built: inf, NaN, or longer than the platform can wait.
WAIT_TOO_LONG_TEMPLATE = (
    "must be a finite number of seconds, at most {most:.0f} (about {years:.0f} years, the longest this "
    "platform can wait)"
)
_SECONDS_A_YEAR = 365.25 * 24 * 3600
# The parts of a call's config that a worker process gets (plain strings; callbacks cannot cross).
PORTABLE_KEYS = ("thread_id", IDEMPOTENCY_KEY)
# The error of a process-isolated tool that returned a Command: its update could carry anything back.
COMMAND_IN_PROCESS = (
    "it returned a LangGraph Command, which a tool with isolation='process' may not: return a result, or run "
    "the tool with isolation='thread'"
)


# Which exceptions of a tool another attempt may fix: exception types, or a predicate on the exception.
RetryOn = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What one call produced, as plain text: the result (`error_kind` None), the result check's reason
    (`empty_result`), what went wrong (`tool_error`), or nothing (`timeout`). Not yet cut: the caller bounds
    it where it stores it."""

    error_kind: ErrorKind | None
    text: str
    # A LangGraph Command the tool returned (`text` empty): execute_tool decides what of it applies
    # (`reinloop.tools.commands`). Only from a call in a thread: a worker process never sends one back.
    command: Command[Any] | None = None
    # Whether another attempt may fix this failure (`reinloop.tools.retry` runs the call again in place).
    transient: bool = False
    # A tool's artifact (response_format="content_and_artifact"): kept on its ToolMessage, never shown.
    artifact: Any = None


@dataclass(frozen=True, slots=True)
class ResultRules:
    """How a tool's outcome is judged where it ran (pickled to a worker with the tool): `check` finds an empty
    result; `is_error` an error the tool reports in its text; `retry_on` the exceptions another attempt may
    fix (None: all but ToolException); `handle_tool_error` is the tool's own, applied to its ToolException."""

    check: ResultCheck = reject_empty
    is_error: Callable[[str], bool] | None = None
    retry_on: RetryOn | None = None
    handle_tool_error: Any = False

    def transient(self, exc: BaseException) -> bool:
        if self.retry_on is None:
            return not isinstance(exc, ToolException)
        if isinstance(self.retry_on, tuple):
            return isinstance(exc, self.retry_on)
        try:
            return bool(self.retry_on(exc))
        except Exception:  # a predicate that fails retries nothing
            return False

    def error_text(self, exc: BaseException) -> str:
        if isinstance(exc, ToolException) and self.handle_tool_error:
            return handled_error(exc, self.handle_tool_error)
        return describe_error(exc)


class ToolTimeoutError(TimeoutError):
    """The call did not return within its time limit; its thread was abandoned."""


class ToolExitError(Exception):
    """The call ended its thread with a BaseException that is not an Exception (`sys.exit()`, a
    KeyboardInterrupt of its own). Raised in its place: re-raised in the caller's thread, it would end the
    caller's process or be taken for the user's Ctrl-C."""


def wait_problem(seconds: float, most: float = MAX_TIMEOUT_S) -> str | None:
    """Why `seconds` cannot be a wait of at most `most` seconds (inf, NaN or more), or None: for settings,
    checked when they are given rather than at the first wait."""
    if seconds <= most:  # False for NaN, as for inf
        return None
    return WAIT_TOO_LONG_TEMPLATE.format(most=most, years=most / _SECONDS_A_YEAR)


def run_tool(
    entry: RegisteredTool, args: dict[str, Any], timeout_s: float, config: RunnableConfig | None = None
) -> ToolRun:
    """Run one registered tool with `args` as its isolation says, at most `timeout_s` seconds.

    A process-isolated tool gets only the thread id and the idempotency key of `config`: callbacks, tracers
    and the other parts of a RunnableConfig cannot be sent to another process.
    """
    return drive(tool_steps(entry, args, timeout_s, config))


async def arun_tool(
    entry: RegisteredTool, args: dict[str, Any], timeout_s: float, config: RunnableConfig | None = None
) -> ToolRun:
    """`run_tool` on the event loop: the same limits and outcomes, and the loop is never blocked."""
    return await adrive(tool_steps(entry, args, timeout_s, config))


def tool_steps(
    entry: RegisteredTool, args: dict[str, Any], timeout_s: float, config: RunnableConfig | None
) -> Steps[ToolRun]:
    """`run_tool` as steps for `reinloop.drivers`."""
    tool, rules = entry.runner, entry.rules
    if entry.isolation == "process":
        return (yield from _in_process(tool, args, rules, timeout_s, _portable(config)))
    settle = partial(_settle, tool, args, rules, config)
    if is_async_tool(tool):
        asettle = partial(_asettle, tool, args, rules, config)
        wait = partial(await_with_timeout, asettle, timeout_s)
    else:
        wait = partial(acall_with_timeout, settle, timeout_s)
    try:
        return (yield from io(partial(call_with_timeout, settle, timeout_s), wait))
    except ToolTimeoutError:
        return ToolRun("timeout", "", transient=True)


def is_async_tool(tool: BaseTool) -> bool:
    """Whether the tool has its own async form (a coroutine, or an `_arun` of its own), which `arun_tool`
    awaits on the event loop; any other tool runs in a thread there, as it does under `run_tool`."""
    coroutine = getattr(tool, "coroutine", _NO_COROUTINE_FIELD)
    if coroutine is not _NO_COROUTINE_FIELD:  # StructuredTool, Tool: an _arun that runs the func in a thread
        return coroutine is not None
    return type(tool)._arun is not BaseTool._arun


_NO_COROUTINE_FIELD = object()


def _settle(tool: BaseTool, args: dict[str, Any], rules: ResultRules, config: RunnableConfig | None) -> ToolRun:
    """Call the tool and judge its result where it ran: the check sees the raw value, which leaves only as text.

    Runs in the call's own thread or worker process, never the caller's, so converting the value to text
    counts against the timeout, and every BaseException (`sys.exit()` included) ends only this call.
    """
    return drive(_settle_steps(tool, args, rules, config))


async def _asettle(tool: BaseTool, args: dict[str, Any], rules: ResultRules, config: RunnableConfig | None) -> ToolRun:
    """`_settle` for an async tool, in the call's own task on the event loop."""
    return await adrive(_settle_steps(tool, args, rules, config))


def _settle_steps(
    tool: BaseTool, args: dict[str, Any], rules: ResultRules, config: RunnableConfig | None
) -> Steps[ToolRun]:
    try:
        value = yield from io(partial(invoke_tool, tool, args, config), partial(tool.ainvoke, args, config))
        # Before the result check, which could start a generator: a lazy value is no result whatever it holds.
        if lazy := refuse_lazy(value):
            return ToolRun("tool_error", lazy)
        if isinstance(value, Command):
            return ToolRun(None, "", command=value)
        if isinstance(value, ToolMessage) and value.status == "error":
            return ToolRun("tool_error", content_text(value))
        # The text is made once: before the result check only for a tool whose text may say it failed.
        text = result_text(value) if rules.is_error is not None else None
        if text is not None and rules.is_error is not None and rules.is_error(text):
            return ToolRun("tool_error", text)
        if reason := rules.check(value):
            return ToolRun("empty_result", reason)
        artifact = value.artifact if isinstance(value, ToolMessage) else None
        return ToolRun(None, result_text(value) if text is None else text, artifact=artifact)
    except GraphBubbleUp:
        raise
    except UnshowableResultError as exc:
        return ToolRun("tool_error", str(exc))
    except BaseException as exc:
        return ToolRun("tool_error", rules.error_text(exc), transient=rules.transient(exc))


def call_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """Run `fn` in a daemon thread (a pooled one: `_Workers`) and return its value if it finished within
    `timeout_s` seconds.

    Python cannot kill a thread, so a hung call is abandoned rather than stopped: it keeps its daemon thread
    until it returns or the process exits, but it no longer blocks the agent (a hung sync tool would
    otherwise hang the loop, and a ThreadPoolExecutor would even block interpreter exit). The context is
    copied so LangGraph's and LangChain's context variables (config, callbacks) reach the tool.

    The limit is hard: a value that `fn` produced after the deadline raises `ToolTimeoutError` too. A
    function holding the GIL (a catastrophic regex) keeps this thread from waking at the deadline; when it
    wakes, the function's own finish time decides. An Exception from `fn` is re-raised; any other
    BaseException (`sys.exit()`) becomes `ToolExitError`.
    """
    call = _ThreadCall(fn)
    concurrent.futures.wait([call.finished], timeout_s)
    return call.outcome(timeout_s)


async def acall_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """`call_with_timeout` for the event loop: the same daemon thread and limits, awaited without blocking
    the loop; a call that is still running at the deadline (or when the caller is cancelled) is abandoned."""
    call = _ThreadCall(fn)
    await asyncio.wait([asyncio.wrap_future(call.finished)], timeout=timeout_s)
    return call.outcome(timeout_s)


class _ThreadCall(Generic[T]):
    """`fn` running in a daemon thread of its own while it runs (`_Workers`), which records when it finished
    and what it returned or raised."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._value: dict[str, Any] = {}
        # Set by the thread itself: the caller's wait (a thread or an event loop) only watches it.
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.finished.set_running_or_notify_cancel()
        context = contextvars.copy_context()
        self._started_at = time.monotonic()
        _workers.run(partial(context.run, self._target, fn))

    def _target(self, fn: Callable[[], T]) -> None:
        try:
            self._value["value"] = fn()
        except BaseException as exc:  # handed to the caller in outcome()
            self._value["error"] = exc
        finally:
            self._value["finished_at"] = time.monotonic()
            self.finished.set_result(None)

    def outcome(self, timeout_s: float) -> T:
        """What `fn` returned or raised, once waited for; `ToolTimeoutError` if it was not done in time."""
        if not self.finished.done() or self._value["finished_at"] - self._started_at > timeout_s:
            raise ToolTimeoutError(f"no result within {timeout_s:g} s")
        if "error" not in self._value:
            value: T = self._value["value"]
            return value
        error = self._value["error"]
        if isinstance(error, Exception):
            raise error
        raise ToolExitError(describe_error(error)) from error


class _Workers:
    """Daemon threads that run one call each and then wait for the next, so a call does not start a thread.

    A worker is reused only once its call has returned: a call that hangs past its deadline keeps its worker,
    and the next call gets an idle worker or a new one, so a hung tool never delays later calls, exactly as
    with a thread per call. Workers are started with `_thread.start_new_thread`, which does not wait for the
    new thread to run (`threading.Thread.start()` does: on a busy interpreter a GIL switch interval, 5 ms, of a
    blocked caller), and are never joined, so a hung one cannot block interpreter exit either. At most
    `idle_max` wait idle; one that finds the idle list full ends.
    """

    def __init__(self, idle_max: int) -> None:
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._idle_max = idle_max

    def run(self, call: Callable[[], None]) -> None:
        """Run `call` (which must not raise) in an idle worker, or in a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            _thread.start_new_thread(self._serve, (inbox,))
        inbox.put(call)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            call = inbox.get()
            call()
            del call  # the finished call's closure (its tool's value) is not held while the worker waits
            with self._lock:
                if len(self._idle) >= self._idle_max:
                    return
                self._idle.append(inbox)

    def forget(self) -> None:
        # A forked child has none of its parent's threads: their inboxes would never be read.
        self._idle, self._lock = [], threading.Lock()


# Idle tool threads kept for the next calls: more than one round's parallel calls usually need.
IDLE_WORKERS = 8
_workers = _Workers(IDLE_WORKERS)
os.register_at_fork(after_in_child=_workers.forget)


async def await_with_timeout(make: Callable[[], Coroutine[Any, Any, T]], timeout_s: float) -> T:
    """Await `make()` as its own task on the running loop; `ToolTimeoutError` unless it finished within
    `timeout_s` seconds.

    At the deadline (or when the caller is cancelled) the task is cancelled and abandoned, not waited for: a
    coroutine that ignores its cancellation keeps running on the loop, as a hung thread keeps its thread, but
    the agent goes on. An async tool that blocks the loop (time.sleep in an `async def`) blocks every run on
    it: such a tool belongs in a sync function, which runs in a thread. As in `call_with_timeout`, the
    coroutine's own finish time decides, so a loop busy with other runs does not turn a result into a timeout.
    """
    finished_at: list[float] = []

    async def timed() -> T:
        try:
            return await make()
        finally:
            finished_at.append(time.monotonic())

    started_at = time.monotonic()
    task = asyncio.ensure_future(timed())
    try:
        await asyncio.wait([task], timeout=timeout_s)
    finally:
        if not task.done():
            task.cancel()
            _abandoned.add(task)
            task.add_done_callback(_abandoned.discard)
    if not finished_at or finished_at[0] - started_at > timeout_s or not task.done():
        raise ToolTimeoutError(f"no result within {timeout_s:g} s")
    return task.result()


# Abandoned tasks, referenced until they end: the event loop itself keeps only weak references to its tasks.
_abandoned: set[asyncio.Future[Any]] = set()


def invoke_tool(tool: BaseTool, args: dict[str, Any], config: RunnableConfig | None = None) -> Any:
    """Call a LangChain tool synchronously; async-only tools run on their own event loop."""
    if isinstance(tool, StructuredTool) and tool.func is None and tool.coroutine is not None:
        return asyncio.run(tool.ainvoke(args, config))
    return tool.invoke(args, config)


# Process isolation -------------------------------------------------------------------------------------


def _portable(config: RunnableConfig | None) -> RunnableConfig:
    """What of `config` a worker process gets: the keys a tool may read, all plain strings."""
    configurable = (config or {}).get("configurable") or {}
    return {"configurable": {key: configurable[key] for key in PORTABLE_KEYS if key in configurable}}


def _in_process(
    tool: BaseTool, args: dict[str, Any], rules: ResultRules, timeout_s: float, config: RunnableConfig
) -> Steps[ToolRun]:
    # pebble kills the worker once the task has run `timeout_s` (counted from when a worker took it) and
    # starts a replacement; a worker that dies is reported as ProcessExpired.
    task = (tool, args, rules, timeout_s, config)
    schedule = partial(_schedule, task, timeout_s)
    # Off the event loop under the async driver: a cold pool starts its workers, which blocks.
    future = yield from io(schedule, partial(asyncio.to_thread, schedule))
    wait_s = timeout_s + WORKER_WAIT_S
    try:
        return (yield from io(partial(future.result, timeout=wait_s), partial(_await_future, future, wait_s)))
    except TimeoutError:
        return ToolRun("timeout", "", transient=True)
    except ProcessExpired as exc:
        return ToolRun("tool_error", f"its worker process ended abnormally (exit code {exc.exitcode})", transient=True)
    except Exception as exc:  # the pool itself failed; a new pool serves the next call
        failed = f"its worker process failed ({describe_error(exc)}){_main_guard_hint()}"
        return ToolRun("tool_error", failed, transient=True)
    finally:
        # A no-op once the call is done. Otherwise (our wait ran out, or the caller was interrupted or
        # cancelled) it makes pebble kill the worker, so an abandoned call does not keep running.
        future.cancel()


def _schedule(task: tuple[Any, ...], timeout_s: float) -> ProcessFuture[ToolRun]:
    return _worker_pool().schedule(_run_in_worker, args=task, timeout=timeout_s)


async def _await_future(future: concurrent.futures.Future[T], timeout_s: float) -> T:
    return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)


def _main_guard_hint() -> str:
    # The commonest cause: workers import the main script, and a script without the guard starts its agent
    # again in every worker.
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if script is None:
        return ""
    return (
        f'; if {script} runs an agent, keep that code under `if __name__ == "__main__":`, since '
        "worker processes import the main script"
    )


def _run_in_worker(
    tool: BaseTool, args: dict[str, Any], rules: ResultRules, timeout_s: float, config: RunnableConfig
) -> ToolRun:
    """The body of a process-isolated call, in the worker."""
    # pebble stops a worker with SIGTERM and a Python-level handler, which cannot run while the tool holds
    # the GIL in C code that never checks for signals (sum(range(10**10))); pebble then waits 3 s before
    # SIGKILL. The default action ends the worker at the deadline.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    started_at = time.monotonic()
    run = _settle(tool, args, rules, config)
    if run.command is not None:
        run = ToolRun("tool_error", COMMAND_IN_PROCESS)
    # pebble looks at deadlines every 0.1 s: a call that finished after its deadline, before the kill, is
    # a timeout all the same.
    return ToolRun("timeout", "", transient=True) if time.monotonic() - started_at > timeout_s else run


_pool: ProcessPool | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # A forked child inherits the parent's pool object but none of its threads: stopping that pool would
    # kill the parent's workers. The child starts its own pool if it needs one.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _worker_pool() -> ProcessPool:
    """The shared pool of warm workers, started on first use and replaced if it broke."""
    global _pool
    with _pool_lock:
        if _pool is None or not _pool.active:
            if _pool is not None:
                _shut_down(_pool)
            # A worker imports reinloop as soon as it starts, so that its first call is warm. It does so in the
            # initializer, after it has set up its channel: a worker still unpickling the channel when pebble
            # removes it at shutdown prints a traceback.
            _pool = ProcessPool(
                max_workers=POOL_WORKERS,
                initializer=importlib.import_module,
                initargs=(__name__,),
                context=_start_context(),
            )
        return _pool


def _start_context() -> Any:
    # fork would copy this multi-threaded process (LangGraph runs nodes in threads) with other threads' locks
    # held; a forkserver forks workers from a clean single-threaded server instead. Spawn where there is none.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


@atexit.register
def stop_workers() -> None:
    """Stop the worker processes, hung ones included, without waiting for their calls: at interpreter exit, or
    when a caller stops (the command on Ctrl-C). A later process-isolated call starts a new pool."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        _shut_down(pool)


def _shut_down(pool: ProcessPool) -> None:
    # stop() drops the calls still queued; join() then ends pebble's threads and kills the workers.
    pool.stop()
    pool.join()
