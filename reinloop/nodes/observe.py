"""observe: turn this round's checks and outcomes into observations for the model.

Reads `decision`, `checks`, `tool_results`, `consecutive_errors`, `streak_errors`, `reflected_at`, `replans`,
`call_window`, `tool_attempts`. Writes `messages` (exactly one `ToolMessage` per requested call, in the
order requested, rejected calls and answers from cache included, each outcome as execute_tool stored it,
tool output already cut; or one note when the reply could not be parsed), the error streak
(`consecutive_errors`: each error, refusals included, adds one, a real tool success resets it, an answer from
cache leaves it as it is, a call retried in place counts once; `streak_errors`: one line per error, for the
reflection turn; `reflected_at` and `replans`, cleared with the streak), `call_window` (what became of each
call, for the repeat guards of `reinloop.repeats`) and `tool_attempts` (the runs of this round's calls,
retries included, added).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from reinloop.context import AgentContext
from reinloop.errors import InvariantError
from reinloop.memory.window import error_note
from reinloop.repeats import CACHED_RESULT_TEMPLATE, REFUSALS, advance_window, record
from reinloop.state import AgentState, CallCheck, CallRecord, ErrorKind, ToolOutcome, runs
from reinloop.text import gist, truncate

__all__ = ["PARSE_FAILED_TEMPLATE", "observe"]

PARSE_FAILED_TEMPLATE = "Error: your reply could not be read ({error}) and was discarded. Reply with {expected}."
# One error of the streak, as the reflection turn lists it: the call and the error's first sentence.
STREAK_LINE_CHARS = 100


@dataclass
class _Streak:
    """The error streak as this round changes it."""

    errors: int
    lines: list[str]
    reflected_at: int | None
    replans: int  # re-plan turns this streak got (check_finish grants them)
    keep: int  # lines kept: the last error_threshold

    @classmethod
    def of(cls, state: AgentState, keep: int) -> _Streak:
        lines = list(state.get("streak_errors") or [])
        errors, replans = state.get("consecutive_errors", 0), state.get("replans", 0)
        return cls(errors, lines, state.get("reflected_at"), replans, keep)

    def error(self, what: str, text: str) -> None:
        self.errors += 1
        # Cut once, as a whole line, so the marker counts every character cut.
        line = truncate(f"{what}: {gist(text)}", STREAK_LINE_CHARS)
        self.lines = [*self.lines, line][-self.keep :]

    def success(self) -> None:
        self.errors, self.lines, self.reflected_at, self.replans = 0, [], None, 0

    def update(self) -> dict[str, Any]:
        return {
            "consecutive_errors": self.errors,
            "streak_errors": self.lines,
            "reflected_at": self.reflected_at,
            "replans": self.replans,
        }


def observe(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    streak = _Streak.of(state, ctx.settings.error_threshold)
    decision = state["decision"]
    if decision["kind"] == "unparsable":
        note = PARSE_FAILED_TEMPLATE.format(error=decision["error"], expected=ctx.protocol.expected_format)
        streak.error("your reply", f"could not be read ({decision['error']})")
        return {"messages": [error_note(note)], **streak.update()}
    results = state.get("tool_results", [])
    outcomes = {outcome["call_id"]: outcome for outcome in results}
    messages: list[BaseMessage] = []
    records: list[CallRecord] = []
    for check in state.get("checks", []):
        outcome = _outcome(check, outcomes)
        content, error_kind = _observation(check, outcome)
        status = "error" if error_kind else "success"
        artifact = outcome.get("artifact") if outcome is not None else None
        messages.append(
            ToolMessage(content, tool_call_id=check["call_id"], name=check["name"], status=status, artifact=artifact)
        )
        records.append(record(check, outcome))
        if error_kind in REFUSALS:
            continue  # the repeat guards' own feedback: the dead-loop escalation counts these, not the streak
        if error_kind is not None:
            streak.error(_called(check), content)
        elif outcome is not None:  # a real tool success; an answer from cache is not one
            streak.success()
    window = advance_window(state.get("call_window") or [], records, ctx.settings)
    # An outcome saved by a version that did not count attempts ran once.
    attempts = state.get("tool_attempts", 0) + sum(outcome.get("attempts", 1) for outcome in results)
    return {"messages": messages, "call_window": window, "tool_attempts": attempts, **streak.update()}


def _outcome(check: CallCheck, outcomes: dict[str, ToolOutcome]) -> ToolOutcome | None:
    """The run's outcome of a call that was to run; None for a call that did not run."""
    if not runs(check):
        return None
    outcome = outcomes.get(check["call_id"])
    if outcome is None:
        raise InvariantError(f"tool call {check['call_id']!r} ({check['name']!r}) was validated but has no outcome")
    return outcome


def _called(check: CallCheck) -> str:
    # default=str: arguments of a rejected call are as the model sent them.
    return f"{check['name']}({json.dumps(check['args'], ensure_ascii=False, default=str)})"


def _observation(check: CallCheck, outcome: ToolOutcome | None) -> tuple[str, ErrorKind | None]:
    if outcome is not None:
        return outcome["content"], outcome["error_kind"]
    if (cached := check.get("cached")) is not None:
        return CACHED_RESULT_TEMPLATE.format(result=cached), None
    return check["error"] or "", check["error_kind"]
