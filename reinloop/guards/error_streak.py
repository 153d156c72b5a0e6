"""The error streak (`error_streak`): errors since the last real tool success get one reflection turn, then end
the run.

Every error of a round counts once (a call retried in place included), and so does every reply of the round
that could not be read (its parse retries' included); refusals of the repeat guards are not errors
(`dead_loop` counts those). A real tool success resets the streak, an answer from cache leaves it as it is.
When the streak first reaches `error_threshold`, the run goes on with a reflection turn (with
`error_reflection`): the next decision is shown what failed, one line per error; `error_streak` trips when the
errors continue after it, or at the threshold without `error_reflection`, and on every later round until a
real tool success. A re-plan turn may replace the stop (`AgentConfig.max_replans`); it leaves the streak as
it is. Its state: `consecutive_errors`, `streak_errors`, `reflected_at`; its settings: `error_threshold` and
`error_reflection` of `AgentConfig`.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage

from reinloop.guards.base import QUOTE_CHARS, Guard, Round, called
from reinloop.guards.repeats import REFUSALS
from reinloop.memory.window import is_error_note
from reinloop.state import AgentState, RunState
from reinloop.text import counted, gist, truncate

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["REFLECTION_TEMPLATE", "STREAK_LINE_CHARS", "ErrorStreak", "listed"]

REFLECTION_TEMPLATE = (
    "Your last {count} attempts failed:\n{errors}\nTry another tool, other arguments, or answer with what you know."
)
# One error of the streak, as the reflection turn lists it: the call and the error's first sentence.
STREAK_LINE_CHARS = 100


class ErrorStreak(Guard):
    """Errors in a row: a reflection turn at `error_threshold`, then the `error_streak` stop."""

    name = reason = "error_streak"
    exit_code = 4
    template = "Stopped: {error_count} in a row (the limit is {threshold}). The last one: {last_error}"
    replan = "your attempts keep failing:"

    @property
    def fresh(self) -> dict[str, Any]:
        return {"consecutive_errors": 0, "streak_errors": [], "reflected_at": None}

    def observe(self, state: AgentState, round: Round, ctx: AgentContext) -> dict[str, Any]:
        errors, reflected_at = state.get("consecutive_errors", 0), state.get("reflected_at")
        lines = list(state.get("streak_errors") or [])
        if round.unreadable:
            why = "could not be read" + (f" ({round.parse_error})" if round.parse_error is not None else "")
            errors, lines = errors + round.unreadable, [*lines, *[_line("your reply", why)] * round.unreadable]
        for seen in round.calls:
            if seen.error_kind in REFUSALS:
                continue  # the repeat guards' own feedback: the dead-loop escalation counts these, not the streak
            if seen.error_kind is not None:
                errors, lines = errors + 1, [*lines, _line(called(seen.check), seen.content)]
            elif seen.outcome is not None:  # a real tool success; an answer from cache is not one
                errors, lines, reflected_at = 0, [], None
        keep = ctx.settings.error_threshold
        return {"consecutive_errors": errors, "streak_errors": lines[-keep:], "reflected_at": reflected_at}

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        errors, settings = state.get("consecutive_errors", 0), ctx.settings
        if errors < settings.error_threshold:
            return False
        if not settings.error_reflection:
            return True
        # The reflection turn is granted when the streak first reaches the threshold; the guard trips when
        # errors continue after it (an answer from cache leaves the count as it was).
        reflected_at = state.get("reflected_at")
        return reflected_at is not None and errors > reflected_at

    def going_on(self, state: RunState, ctx: AgentContext) -> dict[str, Any]:
        errors, settings = state.get("consecutive_errors", 0), ctx.settings
        if settings.error_reflection and errors >= settings.error_threshold and state.get("reflected_at") is None:
            lines = listed(state.get("streak_errors") or [])
            return {"reflection": REFLECTION_TEMPLATE.format(count=errors, errors=lines), "reflected_at": errors}
        return {}

    def fields(self, state: AgentState, ctx: AgentContext) -> dict[str, Any]:
        errors = state.get("consecutive_errors", 0)
        return {
            "errors": errors,
            "error_count": counted(errors, "error"),
            "threshold": ctx.settings.error_threshold,
            "last_error": _last_error(state),
        }

    def failed_attempts(self, state: AgentState, ctx: AgentContext) -> list[str]:
        return list(state.get("streak_errors") or [])


def listed(errors: list[str]) -> str:
    """Errors one line each, an error that came more than once listed once with its count."""
    counts = Counter(errors)
    return "\n".join(f"- {line}" + (f" ({counts[line]} times)" if counts[line] > 1 else "") for line in counts)


def _line(what: str, text: str) -> str:
    # Cut once, as a whole line, so the marker counts every character cut.
    return truncate(f"{what}: {gist(text)}", STREAK_LINE_CHARS)


def _last_error(state: AgentState) -> str:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, ToolMessage) and message.status == "error":
            return truncate(message.text, QUOTE_CHARS)
        if is_error_note(message):  # an unreadable reply's note
            return truncate(message.text, QUOTE_CHARS)
    return "(none recorded)"
