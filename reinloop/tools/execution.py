"""Running one tool call under a hard wall-clock timeout, in a daemon thread or in a worker process.

A thread (the default) runs any tool, sync or async, and receives the run's config (callbacks). A worker
process (opt-in per tool, `isolation="process"`) is for tools that may hold the GIL or end their process: it
is killed at the deadline, and nothing it does reaches the agent's process but text.

Whatever happens inside a call (a result, an empty result, an exception, `sys.exit()`, a crash, a result
without a text form, a timeout) comes back as a `ToolRun`: an error kind and plain text, decided where the
tool ran, so the raw value never crosses a process boundary and nothing is re-raised in the agent. Only
LangGraph control flow (`GraphBubbleUp`) and an interrupt of the caller's own thread pass through. The one
raw value kept is a LangGraph `Command` returned in a thread, which execute_tool judges; a worker process
reports one as an error.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command
from pebble import ProcessExpired, ProcessPool

from reinloop.state import ErrorKind
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.results import ResultCheck, UnshowableResultError, describe_error, result_text

if TYPE_CHECKING:
    from reinloop.tools.registry import RegisteredTool

__all__ = [
    "ISOLATIONS",
    "POOL_WORKERS",
    "WORKER_WAIT_S",
    "Isolation",
    "ToolExitError",
    "ToolRun",
    "ToolTimeoutError",
    "call_with_timeout",
    "invoke_tool",
    "run_tool",
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
# The parts of a call's config that a worker process gets (plain strings; callbacks cannot cross).
PORTABLE_KEYS = ("thread_id", IDEMPOTENCY_KEY)
# The error of a process-isolated tool that returned a Command: its update could carry anything back.
COMMAND_IN_PROCESS = (
    "it returned a LangGraph Command, which a tool with isolation='process' may not: return a result, or run "
    "the tool with isolation='thread'"
)


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


class ToolTimeoutError(TimeoutError):
    """The call did not return within its time limit; its thread was abandoned."""


class ToolExitError(Exception):
    """The call ended its thread with a BaseException that is not an Exception (`sys.exit()`, a
    KeyboardInterrupt of its own). Raised in its place: re-raised in the caller's thread, it would end the
    caller's process or be taken for the user's Ctrl-C."""


def run_tool(
    entry: RegisteredTool, args: dict[str, Any], timeout_s: float, config: RunnableConfig | None = None
) -> ToolRun:
    """Run one registered tool with `args` as its isolation says, at most `timeout_s` seconds.

    A process-isolated tool gets only the thread id and the idempotency key of `config`: callbacks, tracers
    and the other parts of a RunnableConfig cannot be sent to another process.
    """
    if entry.isolation == "process":
        return _run_in_process(entry.tool, args, entry.check_result, timeout_s, _portable(config))
    try:
        return call_with_timeout(lambda: _settle(entry.tool, args, entry.check_result, config), timeout_s)
    except ToolTimeoutError:
        return ToolRun("timeout", "")


def _settle(tool: BaseTool, args: dict[str, Any], check: ResultCheck, config: RunnableConfig | None) -> ToolRun:
    """Call the tool and judge its result where it ran: the check sees the raw value, which leaves only as text.

    Runs in the call's own thread or worker process, never the caller's, so converting the value to text
    counts against the timeout, and every BaseException (`sys.exit()` included) ends only this call.
    """
    try:
        value = invoke_tool(tool, args, config)
        if isinstance(value, Command):
            return ToolRun(None, "", command=value)
        if reason := check(value):
            return ToolRun("empty_result", reason)
        return ToolRun(None, result_text(value))
    except GraphBubbleUp:
        raise
    except UnshowableResultError as exc:
        return ToolRun("tool_error", str(exc))
    except BaseException as exc:
        return ToolRun("tool_error", describe_error(exc))


def call_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """Run `fn` in a daemon thread and return its value if it finished within `timeout_s` seconds.

    Python cannot kill a thread, so a hung call is abandoned rather than stopped: it keeps its daemon thread
    until it returns or the process exits, but it no longer blocks the agent (a hung sync tool would
    otherwise hang the loop, and a ThreadPoolExecutor would even block interpreter exit). The context is
    copied so LangGraph's and LangChain's context variables (config, callbacks) reach the tool.

    The limit is hard: a value that `fn` produced after the deadline raises `ToolTimeoutError` too. A
    function holding the GIL (a catastrophic regex) keeps this thread from waking at the deadline; when it
    wakes, the function's own finish time decides. An Exception from `fn` is re-raised; any other
    BaseException (`sys.exit()`) becomes `ToolExitError`.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc
        finally:
            outcome["finished_at"] = time.monotonic()
            finished.set()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(target,), daemon=True, name="reinloop-tool")
    started_at = time.monotonic()
    thread.start()
    if not finished.wait(timeout_s) or outcome["finished_at"] - started_at > timeout_s:
        raise ToolTimeoutError(f"no result within {timeout_s:g} s")
    if "error" not in outcome:
        value: T = outcome["value"]
        return value
    error = outcome["error"]
    if isinstance(error, Exception):
        raise error
    raise ToolExitError(describe_error(error)) from error


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


def _run_in_process(
    tool: BaseTool, args: dict[str, Any], check: ResultCheck, timeout_s: float, config: RunnableConfig
) -> ToolRun:
    # pebble kills the worker once the task has run `timeout_s` (counted from when a worker took it) and
    # starts a replacement; a worker that dies is reported as ProcessExpired.
    task = (tool, args, check, timeout_s, config)
    future = _worker_pool().schedule(_run_in_worker, args=task, timeout=timeout_s)
    try:
        return future.result(timeout=timeout_s + WORKER_WAIT_S)
    except TimeoutError:
        return ToolRun("timeout", "")
    except ProcessExpired as exc:
        return ToolRun("tool_error", f"its worker process ended abnormally (exit code {exc.exitcode})")
    except Exception as exc:  # the pool itself failed; a new pool serves the next call
        return ToolRun("tool_error", f"its worker process failed ({describe_error(exc)}){_main_guard_hint()}")
    finally:
        # A no-op once the call is done. Otherwise (our wait ran out, or the caller was interrupted) it makes
        # pebble kill the worker, so an abandoned call does not keep running.
        future.cancel()


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
    tool: BaseTool, args: dict[str, Any], check: ResultCheck, timeout_s: float, config: RunnableConfig
) -> ToolRun:
    """The body of a process-isolated call, in the worker."""
    # pebble stops a worker with SIGTERM and a Python-level handler, which cannot run while the tool holds
    # the GIL in C code that never checks for signals (sum(range(10**10))); pebble then waits 3 s before
    # SIGKILL. The default action ends the worker at the deadline.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    started_at = time.monotonic()
    run = _settle(tool, args, check, config)
    if run.command is not None:
        run = ToolRun("tool_error", COMMAND_IN_PROCESS)
    # pebble looks at deadlines every 0.1 s: a call that finished after its deadline, before the kill, is
    # a timeout all the same.
    return ToolRun("timeout", "") if time.monotonic() - started_at > timeout_s else run


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
def _stop_pool() -> None:
    """Stop the workers at interpreter exit, hung ones included, without waiting for their calls."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        _shut_down(pool)


def _shut_down(pool: ProcessPool) -> None:
    # stop() drops the calls still queued; join() then ends pebble's threads and kills the workers.
    pool.stop()
    pool.join()
