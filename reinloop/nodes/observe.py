"""observe: turn this round's checks and outcomes into observations for the model.

Reads `decision`, `checks`, `tool_results`, `consecutive_errors`, `tool_attempts`. Writes `messages` (exactly
one `ToolMessage` per requested call, in the order requested, rejected calls included, each outcome as
execute_tool stored it, tool output already cut; or one note when the reply could not be parsed),
`consecutive_errors` (each error adds one, a real success resets it; a call retried in place counts once)
and `tool_attempts` (the runs of this round's calls, retries included, added).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from reinloop.context import AgentContext
from reinloop.errors import InvariantError
from reinloop.state import AgentState

__all__ = ["PARSE_FAILED_TEMPLATE", "observe"]

PARSE_FAILED_TEMPLATE = "Error: your last reply could not be read ({error}) and was discarded. Reply with {expected}."


def observe(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    errors = state.get("consecutive_errors", 0)
    decision = state["decision"]
    if decision["kind"] == "unparsable":
        note = PARSE_FAILED_TEMPLATE.format(error=decision["error"], expected=ctx.protocol.expected_format)
        return {"messages": [HumanMessage(note)], "consecutive_errors": errors + 1}
    results = state.get("tool_results", [])
    outcomes = {outcome["call_id"]: outcome for outcome in results}
    messages: list[BaseMessage] = []
    for check in state.get("checks", []):
        call_id = check["call_id"]
        if check["error_kind"] is None:
            outcome = outcomes.get(call_id)
            if outcome is None:
                raise InvariantError(f"tool call {call_id!r} ({check['name']!r}) was validated but has no outcome")
            content, error_kind = outcome["content"], outcome["error_kind"]
        else:
            content, error_kind = check["error"] or "", check["error_kind"]
        messages.append(
            ToolMessage(
                content,
                tool_call_id=call_id,
                name=check["name"],
                status="error" if error_kind else "success",
            )
        )
        errors = errors + 1 if error_kind else 0
    # An outcome saved by a version that did not count attempts ran once.
    attempts = state.get("tool_attempts", 0) + sum(outcome.get("attempts", 1) for outcome in results)
    return {"messages": messages, "consecutive_errors": errors, "tool_attempts": attempts}
