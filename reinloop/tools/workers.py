"""Process isolation: the shared pool of warm worker processes that runs the calls of tools with
`isolation="process"`.

A worker is killed at its call's deadline (pebble) and replaced; it gets only the plain strings of the call's
config (`PORTABLE_KEYS`) and sends back only a `ToolRun`, judged in the worker. The pool starts on first use,
is replaced when it breaks, is forgotten in a forked child, and is stopped at interpreter exit
(`stop_workers`). What a worker gets is pickled: `_run_in_worker` by this module's path, the tool and its
`ResultRules` by theirs, so each must stay importable there.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from reinloop.drivers import Steps, io
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.outcomes import TIMED_OUT, ResultRules, ToolRun, _settle
from reinloop.tools.results import describe_error
from reinloop.tools.timeouts import WORKER_WAIT_S

if TYPE_CHECKING:  # pebble loads with the first call of a process-isolated tool
    from pebble import ProcessFuture, ProcessPool

T = TypeVar("T")

# Worker processes that run process-isolated calls at once; further calls wait for a free worker, and their
# timeout starts when they start. Each worker is an interpreter with reinloop imported.
POOL_WORKERS = 2
# How long a stop waits for pebble's manager loop (it looks at the pool every 0.1 s) before stopping workers.
MANAGER_STOP_S = 2.0
# The parts of a call's config that a worker process gets (plain strings; callbacks cannot cross).
PORTABLE_KEYS = ("thread_id", IDEMPOTENCY_KEY)
# The error of a process-isolated tool that returned a Command: its update could carry anything back.
COMMAND_IN_PROCESS = (
    "it returned a LangGraph Command, which a tool with isolation='process' may not: return a result, or run "
    "the tool with isolation='thread'"
)


def _portable(config: RunnableConfig | None) -> RunnableConfig:
    """What of `config` a worker process gets: the keys a tool may read, all plain strings."""
    configurable = (config or {}).get("configurable") or {}
    return {"configurable": {key: configurable[key] for key in PORTABLE_KEYS if key in configurable}}


def _in_process(
    tool: BaseTool, args: dict[str, Any], rules: ResultRules, timeout_s: float, config: RunnableConfig
) -> Steps[ToolRun]:
    # pebble kills the worker once the task has run `timeout_s` (counted from when a worker took it) and
    # starts a replacement; a worker that dies is reported as ProcessExpired.
    from pebble import ProcessExpired

    task = (tool, args, rules, timeout_s, config)
    schedule = partial(_schedule, task, timeout_s)
    # Off the event loop under the async driver: a cold pool starts its workers, which blocks.
    future = yield from io(schedule, partial(asyncio.to_thread, schedule))
    wait_s = timeout_s + WORKER_WAIT_S
    try:
        return (yield from io(partial(future.result, timeout=wait_s), partial(_await_future, future, wait_s)))
    except TimeoutError:
        return TIMED_OUT
    except ProcessExpired as exc:
        ended = f"its worker process ended abnormally (exit code {exc.exitcode})"
        return ToolRun("tool_error", ended, transient=True, effect_unknown=True)
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
    return TIMED_OUT if time.monotonic() - started_at > timeout_s else run


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
    from pebble import ProcessPool

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
    # stop() drops the calls still queued and ends pebble's loops; join() then ends its threads and kills the
    # workers. pebble unlinks its channel's semaphores before it kills the workers, so a worker still starting
    # (unpickling that channel: slow on a loaded machine) would fail to open them and print a traceback as the
    # interpreter exits. The workers are stopped first, once pebble's manager can no longer start replacements.
    pool.stop()
    _stop_workers_first(pool)
    pool.join()


def _stop_workers_first(pool: ProcessPool) -> None:
    """SIGTERM to the pool's workers (a starting one dies at once), after pebble's manager loop has ended; nothing
    on a pebble whose private names differ (it then stops them in its own order)."""
    manager_loop = getattr(pool, "_pool_manager_loop", None)
    workers = getattr(getattr(getattr(pool, "_pool_manager", None), "worker_manager", None), "workers", None)
    if not isinstance(manager_loop, threading.Thread) or not isinstance(workers, dict):
        return
    if manager_loop is not threading.current_thread():
        manager_loop.join(MANAGER_STOP_S)
    if manager_loop.is_alive():
        return  # it could still start a worker: leave the order to pebble
    for process in list(workers.values()):
        with contextlib.suppress(OSError, ValueError):  # already gone, or closed
            process.terminate()
