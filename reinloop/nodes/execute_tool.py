"""execute_tool: run one validated call, with a hard timeout and a result check.

Runs once per valid call (a LangGraph `Send` task each), so every finished call is checkpointed on its own
and a resumed thread never re-runs it. Reads the `CallCheck` it is sent. Writes one `ToolOutcome` to
`tool_results`. Outcomes: a result, or an error observation for an exception, a timeout, or an empty
result (pseudo-success). LangGraph control flow (interrupts) passes through untouched.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException
from langgraph.errors import GraphBubbleUp

from reinloop.context import AgentContext
from reinloop.state import CallCheck, ErrorKind, ToolOutcome
from reinloop.tools.execution import ToolTimeoutError, call_with_timeout, invoke_tool
from reinloop.tools.results import to_observation

__all__ = ["EMPTY_RESULT_TEMPLATE", "TIMEOUT_TEMPLATE", "TOOL_ERROR_TEMPLATE", "execute_tool"]

TOOL_ERROR_TEMPLATE = "Error: {name!r} failed: {error}. Check the arguments, or use another tool if it cannot do this."
TIMEOUT_TEMPLATE = (
    "Error: {name!r} did not finish within {timeout:g} s and was abandoned. Try a smaller request, or another tool."
)
EMPTY_RESULT_TEMPLATE = (
    "Error: {name!r} returned no usable result: {reason}. "
    "Try different arguments or another tool; do not repeat the same call."
)


def execute_tool(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    name = check["name"]
    entry = ctx.registry[name]
    timeout = entry.timeout_s or ctx.config.tool_timeout_s
    try:
        value = call_with_timeout(lambda: invoke_tool(entry.tool, check["args"], config), timeout)
    except GraphBubbleUp:
        raise
    except ToolTimeoutError:
        return _outcome(check, TIMEOUT_TEMPLATE.format(name=name, timeout=timeout), "timeout")
    except Exception as exc:
        error = str(exc) if isinstance(exc, ToolException) else f"{type(exc).__name__}: {exc}"
        return _outcome(check, TOOL_ERROR_TEMPLATE.format(name=name, error=error), "tool_error")
    if reason := entry.check_result(value):
        return _outcome(check, EMPTY_RESULT_TEMPLATE.format(name=name, reason=reason), "empty_result")
    return _outcome(check, to_observation(value), None)


def _outcome(check: CallCheck, content: str, error_kind: ErrorKind | None) -> dict[str, Any]:
    outcome = ToolOutcome(call_id=check["call_id"], name=check["name"], content=content, error_kind=error_kind)
    return {"tool_results": [outcome]}
