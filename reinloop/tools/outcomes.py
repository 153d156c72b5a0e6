"""What one tool call produced, judged where it ran: a `ToolRun` of plain text, by the tool's `ResultRules`.

Whatever happens inside a call (a result, an exception, `sys.exit()`, a crash, a timeout, a result without a
text form, a coroutine or generator returned instead of a result) comes back as a `ToolRun`: an error kind and
plain text, so the raw value never crosses a process boundary and nothing is re-raised in the agent. Only
LangGraph control flow (`GraphBubbleUp`) and an interrupt of the caller's own thread pass through; the one raw
value kept is a `Command` returned in a thread, which execute_tool judges. `ResultRules` says what is an error,
whatever the tool's origin; `ToolRun.transient` whether another attempt may fix it, and
`ToolRun.effect_unknown` whether the call may have had its effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command

from reinloop.drivers import Steps, adrive, drive, io
from reinloop.state import ErrorKind
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
    # Whether the call may have had its effect though no answer came back: a timeout, a lost connection, a
    # crashed worker (execute_tool reports it in doubt for a tool not declared safe to repeat).
    effect_unknown: bool = False
    # A tool's artifact (response_format="content_and_artifact"): kept on its ToolMessage, never shown.
    artifact: Any = None


# What a call that ran out of time produced: no answer, and whether it acted is unknown.
TIMED_OUT = ToolRun("timeout", "", transient=True, effect_unknown=True)


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
        return ToolRun(
            "tool_error", rules.error_text(exc), transient=rules.transient(exc), effect_unknown=_effect_unknown(exc)
        )


def _effect_unknown(exc: BaseException) -> bool:
    """Whether the tool's exception says it lost the other side mid-call (a dropped connection, a wait that
    ran out, an MCP server that died), which may have acted all the same."""
    # A refused connection never reached the other side.
    return isinstance(exc, ConnectionError | TimeoutError) and not isinstance(exc, ConnectionRefusedError)


def invoke_tool(tool: BaseTool, args: dict[str, Any], config: RunnableConfig | None = None) -> Any:
    """Call a LangChain tool synchronously; async-only tools run on their own event loop."""
    if isinstance(tool, StructuredTool) and tool.func is None and tool.coroutine is not None:
        return asyncio.run(tool.ainvoke(args, config))
    return tool.invoke(args, config)
