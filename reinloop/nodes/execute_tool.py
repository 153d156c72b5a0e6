"""execute_tool: run one validated call, with a hard timeout and a result check.

Runs once per valid call (a LangGraph `Send` task each), so every finished call is checkpointed on its own
and a resumed thread never re-runs it. Reads the `CallCheck` it is sent. Writes one `ToolOutcome` to
`tool_results`. Outcomes: a result, or an error observation for an exception, a timeout, or an empty
result (pseudo-success). LangGraph control flow (interrupts) passes through untouched.

The tool gets the call's idempotency key in its config (`reinloop.tools.idempotency_key()`), so a call
re-run after a crash can find its earlier effect. A tool declared not idempotent is not re-run at all: a
call of it that was in flight when the process died gets an "unknown_outcome" observation and a record in
`in_doubt` (fail closed).
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.tools import ToolException
from langgraph.errors import GraphBubbleUp

from reinloop.context import AgentContext
from reinloop.state import CallCheck, ErrorKind, InDoubtCall, ToolOutcome
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.execution import ToolTimeoutError, call_with_timeout, invoke_tool
from reinloop.tools.results import to_observation

__all__ = [
    "EMPTY_RESULT_TEMPLATE",
    "TIMEOUT_TEMPLATE",
    "TOOL_ERROR_TEMPLATE",
    "UNKNOWN_OUTCOME_TEMPLATE",
    "execute_tool",
]

TOOL_ERROR_TEMPLATE = "Error: {name!r} failed: {error}. Check the arguments, or use another tool if it cannot do this."
TIMEOUT_TEMPLATE = (
    "Error: {name!r} did not finish within {timeout:g} s and was abandoned. Try a smaller request, or another tool."
)
EMPTY_RESULT_TEMPLATE = (
    "Error: {name!r} returned no usable result: {reason}. "
    "Try different arguments or another tool; do not repeat the same call."
)

UNKNOWN_OUTCOME_TEMPLATE = (
    "Error: the outcome of this {name!r} call is unknown: the process running it stopped before its result "
    "was saved, and {name!r} is not safe to run twice, so it was not run again. It may or may not have taken "
    "effect: check with a read-only tool, or tell the user, before calling it again."
)
# LangGraph sets this configurable key for the first step of a run that continues a saved thread: the
# tasks of that step are the ones the saved checkpoint had left to run (in flight at a crash).
CONFIG_KEY_RESUMING = "__pregel_resuming"


def execute_tool(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    name = check["name"]
    entry = ctx.registry[name]
    if not entry.idempotent and (config.get("configurable") or {}).get(CONFIG_KEY_RESUMING):
        doubt = InDoubtCall(call_id=check["call_id"], name=name, args=check["args"], key=check["key"])
        update = _outcome(check, UNKNOWN_OUTCOME_TEMPLATE.format(name=name), "unknown_outcome")
        return {**update, "in_doubt": [doubt]}
    config = patch_config(config, configurable={IDEMPOTENCY_KEY: check["key"]})
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
