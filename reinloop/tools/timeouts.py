"""The hard deadline of one call: in a daemon thread, or as a task on the event loop; and the longest wait a
setting may ask for.

`call_with_timeout` runs a function in a pooled daemon thread and abandons it at the deadline (Python cannot
kill a thread); `acall_with_timeout` is the same thread awaited on the event loop; `await_with_timeout`
awaits a coroutine as a task that is cancelled and abandoned at the deadline. Either way the call's own
finish time decides: a value produced after the deadline is a `ToolTimeoutError` all the same, and a
BaseException that is not an Exception (`sys.exit()`) comes back as `ToolExitError`. `wait_problem` refuses a
setting longer than the platform can wait (`MAX_TIMEOUT_S`) when it is given.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Generic, TypeVar

from reinloop.tools.results import describe_error

T = TypeVar("T")

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
    call.done.acquire(timeout=max(timeout_s, 0))  # a lock refuses a negative wait, as a Future's did not
    return call.outcome(timeout_s)


async def acall_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """`call_with_timeout` for the event loop: the same daemon thread and limits, awaited without blocking
    the loop; a call that is still running at the deadline (or when the caller is cancelled) is abandoned."""
    finished: concurrent.futures.Future[None] = concurrent.futures.Future()
    call = _ThreadCall(fn, finished)
    await asyncio.wait([asyncio.wrap_future(finished)], timeout=timeout_s)
    return call.outcome(timeout_s)


class _ThreadCall(Generic[T]):
    """`fn` running in a daemon thread of its own while it runs (`_Workers`), which records when it finished
    and what it returned or raised.

    The thread releases `done` when the call ends, and sets `finished` if one is given (for an event loop to
    await): a thread waits on the bare lock, the cheapest handoff there is (a Future's wait builds a waiter,
    an event and a condition for every call)."""

    def __init__(self, fn: Callable[[], T], finished: concurrent.futures.Future[None] | None = None) -> None:
        self._value: dict[str, Any] = {}
        # Released or set by the thread itself: the caller's wait (a thread or an event loop) only watches it.
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.finished = finished
        if finished is not None:
            finished.set_running_or_notify_cancel()
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
            self.done.release()
            if self.finished is not None:
                self.finished.set_result(None)

    def outcome(self, timeout_s: float) -> T:
        """What `fn` returned or raised, once waited for; `ToolTimeoutError` if it was not done in time."""
        finished_at = self._value.get("finished_at")
        if finished_at is None or finished_at - self._started_at > timeout_s:
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
