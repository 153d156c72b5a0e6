"""The error streak (`error_streak`): errors since the last real tool success get one reflection turn, then end
the run.

Every error of a round's valid calls counts once (a call retried in place included). The model's own mistakes
that are caught before anything runs do not (`MODEL_MISTAKES`: an unreadable reply, an unknown tool, invalid
arguments: their feedback says what to fix, and `max_iterations` bounds them), nor do the repeat guards'
refusals (`dead_loop` counts those). A real tool success resets the streak, an answer from cache leaves it. At
`threshold` the run goes on with a reflection turn (with `reflection`); the guard trips when the errors continue
after it (at the threshold without it), and on every later round until a real tool success. Its state:
`consecutive_errors`, `streak_errors`, `reflected_at`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

from reinloop.guards.base import Guard, Note, Round, Stop, at_least, called
from reinloop.guards.repeats import MODEL_MISTAKES, REFUSALS
from reinloop.state import AgentState, RunState
from reinloop.text import counted, gist, truncate

__all__ = ["REFLECTION_TEMPLATE", "STOP_TEMPLATE", "STREAK_LINE_CHARS", "ErrorStreak", "listed"]

STOP_TEMPLATE = "Stopped: {error_count} in a row (the limit is {threshold}). The last one: {last_error}"
REFLECTION_TEMPLATE = (
    "Your last {count} attempts failed:\n{errors}\nTry another tool, other arguments, or answer with what you know."
)
# One error of the streak, as the reflection turn lists it: the call and the error's first sentence.
STREAK_LINE_CHARS = 100


class ErrorStreak(Guard):
    """Errors in a row: a reflection turn at `threshold` (with `reflection`), then the `error_streak` stop."""

    name = "error_streak"
    exit_code = 4
    initial: ClassVar = {"consecutive_errors": 0, "streak_errors": [], "reflected_at": None}

    def __init__(self, threshold: int = 3, reflection: bool = True) -> None:
        at_least("ErrorStreak", threshold=(threshold, 1))
        self.threshold, self.reflection = threshold, reflection

    def observe(self, round: Round, state: AgentState) -> dict[str, Any]:
        errors, reflected_at = state.get("consecutive_errors", 0), state.get("reflected_at")
        lines = list(state.get("streak_errors") or [])
        for seen in round.calls:
            if seen.error_kind in REFUSALS or seen.error_kind in MODEL_MISTAKES:
                continue  # the repeat guards' own feedback (dead_loop counts it), or the model's mistake
            if seen.error_kind is not None:
                errors, lines = errors + 1, [*lines, _line(called(seen.check), seen.content)]
            elif seen.outcome is not None:  # a real tool success; an answer from cache is not one
                errors, lines, reflected_at = 0, [], None
        return {"consecutive_errors": errors, "streak_errors": lines[-self.threshold :], "reflected_at": reflected_at}

    def check(self, state: RunState) -> Stop | Note | None:
        errors, reflected_at = state.get("consecutive_errors", 0), state.get("reflected_at")
        if errors < self.threshold:
            return None
        failed = list(state.get("streak_errors") or [])
        if self.reflection and reflected_at is None:
            # The reflection turn, when the streak first reaches the threshold; the guard stops the run when
            # errors continue after it (an answer from cache leaves the count as it was).
            text = REFLECTION_TEMPLATE.format(count=errors, errors=listed(failed))
            return Note(text, {"reflected_at": errors})
        if self.reflection and errors <= (reflected_at or 0):
            return None
        last = failed[-1] if failed else "(none recorded)"
        message = STOP_TEMPLATE.format(error_count=counted(errors, "error"), threshold=self.threshold, last_error=last)
        return Stop(message, replan="your attempts keep failing:", failed=failed)


def listed(errors: list[str]) -> str:
    """Errors one line each, an error that came more than once listed once with its count."""
    counts = Counter(errors)
    return "\n".join(f"- {line}" + (f" ({counts[line]} times)" if counts[line] > 1 else "") for line in counts)


def _line(what: str, text: str) -> str:
    # Cut once, as a whole line, so the marker counts every character cut.
    return truncate(f"{what}: {gist(text)}", STREAK_LINE_CHARS)
