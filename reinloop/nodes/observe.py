"""observe: turn this round's checks and outcomes into observations for the model, and show them to the guards.

Reads `decision`, `checks`, `tool_results`, `unreadable_replies` and what the guards read. Writes `messages`
(exactly one `ToolMessage` per requested call, in the order requested, rejected calls and answers from cache
included, each outcome as execute_tool stored it, tool output already cut; or one note when the reply could
not be parsed), and what each guard's `observe` hook writes for the round (`reinloop.guards`): the error
streak, the repeat guards' record of recent calls (`call_window`) and stalled decisions, the tools' circuits,
the run's tool attempts.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from reinloop.context import AgentContext
from reinloop.errors import InvariantError
from reinloop.guards import CallResult, Round
from reinloop.memory.window import CACHED_RESULT_TEMPLATE, error_note
from reinloop.state import AgentState, CallCheck, ErrorKind, ToolOutcome, runs

__all__ = ["PARSE_FAILED_TEMPLATE", "observe"]

PARSE_FAILED_TEMPLATE = "Error: your reply could not be read ({error}) and was discarded. Reply with {expected}."


def observe(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    decision = state["decision"]
    if decision["kind"] == "unparsable":
        note = PARSE_FAILED_TEMPLATE.format(error=decision["error"], expected=ctx.protocol.expected_format)
        round = Round(parse_error=decision["error"], unreadable=max(state.get("unreadable_replies", 1), 1))
        return {"messages": [error_note(note)], **_guarded(state, round, ctx)}
    results = state.get("tool_results", [])
    outcomes = {outcome["call_id"]: outcome for outcome in results}
    messages: list[BaseMessage] = []
    seen: list[CallResult] = []
    for check in state.get("checks", []):
        outcome = _outcome(check, outcomes)
        content, error_kind = _observation(check, outcome)
        status = "error" if error_kind else "success"
        artifact = outcome.get("artifact") if outcome is not None else None
        messages.append(
            ToolMessage(content, tool_call_id=check["call_id"], name=check["name"], status=status, artifact=artifact)
        )
        seen.append(CallResult(check, outcome, content, error_kind))
    round = Round(calls=tuple(seen), outcomes=tuple(results), unreadable=state.get("unreadable_replies", 0))
    return {"messages": messages, **_guarded(state, round, ctx)}


def _guarded(state: AgentState, round: Round, ctx: AgentContext) -> dict[str, Any]:
    """What the guards write after `round`."""
    update: dict[str, Any] = {}
    for guard in ctx.guards:
        update.update(guard.observe(round, state))
    return update


def _outcome(check: CallCheck, outcomes: dict[str, ToolOutcome]) -> ToolOutcome | None:
    """The run's outcome of a call that was to run; None for a call that did not run."""
    if not runs(check):
        return None
    outcome = outcomes.get(check["call_id"])
    if outcome is None:
        raise InvariantError(f"tool call {check['call_id']!r} ({check['name']!r}) was validated but has no outcome")
    return outcome


def _observation(check: CallCheck, outcome: ToolOutcome | None) -> tuple[str, ErrorKind | None]:
    if outcome is not None:
        return outcome["content"], outcome["error_kind"]
    if (cached := check.get("cached")) is not None:
        return CACHED_RESULT_TEMPLATE.format(result=cached), None
    return check["error"] or "", check["error_kind"]
