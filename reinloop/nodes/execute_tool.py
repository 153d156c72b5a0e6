"""execute_tool: run one validated call, with a hard timeout and a result check.

Runs once per valid call (a LangGraph `Send` task each), so every finished call is checkpointed on its own
and a resumed thread never re-runs it. Reads the `CallCheck` it is sent. Writes one `ToolOutcome` to
`tool_results`. Outcomes: a result, or an error observation for an exception (`sys.exit()` and a crashed
worker process included), a result that cannot be shown as text, a timeout, or an empty result
(pseudo-success). Nothing else leaves the node: LangGraph control flow (interrupts) passes through
untouched, as does an interrupt of the caller's own thread (Ctrl-C).

What the tool produced (its result, or the message of what it raised) is cut to `observation_max_chars`
here, where it is stored: the checkpoint holds what the model will see, never a tool's whole 10 MB.

The tool gets the call's idempotency key in its config (`reinloop.tools.idempotency_key()`), so a call
re-run after a crash can find its earlier effect. A tool declared not idempotent is not re-run at all: a
call of it that was in flight when the process died gets an "unknown_outcome" observation and a record in
`in_doubt` (fail closed).
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config

from reinloop.context import AgentContext
from reinloop.state import CallCheck, ErrorKind, InDoubtCall, ToolOutcome
from reinloop.storable import clean_text
from reinloop.text import truncate
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.execution import run_tool

__all__ = [
    "EMPTY_RESULT_TEMPLATE",
    "TIMEOUT_TEMPLATE",
    "TOOL_ERROR_TEMPLATE",
    "UNKNOWN_OUTCOME_TEMPLATE",
    "execute_tool",
]

TOOL_ERROR_TEMPLATE = "Error: {name!r} failed: {error}. Check the arguments, or use another tool if it cannot do this."
TIMEOUT_TEMPLATE = (
    "Error: {name!r} did not finish within {timeout:g} s, and its result will not be used. "
    "Try a smaller request, or another tool."
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
    timeout = entry.timeout_s or ctx.settings.tool_timeout_s
    run = run_tool(entry, check["args"], timeout, config)
    # The one cut of tool output; reinloop's own feedback around it is kept whole.
    text = clean_text(truncate(run.text, ctx.settings.observation_max_chars))
    if run.error_kind is None:
        content = text
    elif run.error_kind == "timeout":
        content = TIMEOUT_TEMPLATE.format(name=name, timeout=timeout)
    elif run.error_kind == "empty_result":
        content = EMPTY_RESULT_TEMPLATE.format(name=name, reason=text)
    else:
        content = TOOL_ERROR_TEMPLATE.format(name=name, error=text)
    return _outcome(check, content, run.error_kind)


def _outcome(check: CallCheck, content: str, error_kind: ErrorKind | None) -> dict[str, Any]:
    outcome = ToolOutcome(call_id=check["call_id"], name=check["name"], content=content, error_kind=error_kind)
    return {"tool_results": [outcome]}
