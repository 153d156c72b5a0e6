"""Running one tool call under a hard wall-clock timeout, in a daemon thread or in a worker process.

A thread (the default) runs any tool, sync or async, and receives the run's config (callbacks); a worker
process (opt-in per tool, `isolation="process"`) is for tools that may hold the GIL or end their process: it
is killed at the deadline, and nothing it does reaches the agent's process but text. `run_tool` waits in the
caller's thread; `arun_tool` awaits the thread or the worker without blocking the event loop, and an async tool
on the loop itself, as a task cancelled and abandoned at the deadline. The modules: `outcomes` (`ToolRun`,
`ResultRules`), `timeouts` and `workers`; every name is also imported from here.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_args

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from reinloop.drivers import Steps, adrive, drive, io
from reinloop.tools.outcomes import TIMED_OUT, ResultRules, RetryOn, ToolRun, _asettle, _settle, invoke_tool
from reinloop.tools.timeouts import (
    MAX_TIMEOUT_S,
    WORKER_WAIT_S,
    ToolExitError,
    ToolTimeoutError,
    acall_with_timeout,
    await_with_timeout,
    call_with_timeout,
    wait_problem,
)
from reinloop.tools.workers import COMMAND_IN_PROCESS as COMMAND_IN_PROCESS
from reinloop.tools.workers import POOL_WORKERS, _in_process, _portable, stop_workers

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

# Where a tool call runs: a daemon thread of the agent's process, or a worker process killed at the deadline.
Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)


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
        return TIMED_OUT


def is_async_tool(tool: BaseTool) -> bool:
    """Whether the tool has its own async form (a coroutine, or an `_arun` of its own), which `arun_tool`
    awaits on the event loop; any other tool runs in a thread there, as it does under `run_tool`."""
    coroutine = getattr(tool, "coroutine", _NO_COROUTINE_FIELD)
    if coroutine is not _NO_COROUTINE_FIELD:  # StructuredTool, Tool: an _arun that runs the func in a thread
        return coroutine is not None
    return type(tool)._arun is not BaseTool._arun


_NO_COROUTINE_FIELD = object()
