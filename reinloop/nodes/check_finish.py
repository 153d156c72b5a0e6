"""check_finish: count the round and decide whether the run goes on.

Reads `iteration` and `iterations_left`, what the breakers' predicates read (`reinloop.breakers`):
`decision`, `checks`, `consecutive_errors`, `reflected_at`, `usage`, `tool_attempts`, `streak_errors` and
LangGraph's `remaining_steps`. Writes `iteration`, `iterations_left` (left as it was when answered),
`finish_reason` and `final_answer` (None unless answered), and, for a reflection turn, `reflection` and
`reflected_at`. Outcomes: the first entry of `BREAKERS` that trips, in table order: answered; dead_loop (a
call the model kept repeating after it was answered from cache or refused was refused this round, before it
ran); error_streak (the errors continued after the reflection turn); token_budget (`usage` reached
`run_token_budget`); max_tool_attempts (`tool_attempts` reached it); max_iterations; step_limit (the steps
left under this invocation's recursion limit cannot hold another round and a circuit break); or go on
(`finish_reason` None), with a reflection turn when the error streak first reaches `error_threshold`: the
next decision is shown what failed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from reinloop.breakers import BREAKERS
from reinloop.context import AgentContext
from reinloop.state import AgentState, RunState

__all__ = ["REFLECTION_TEMPLATE", "check_finish"]

REFLECTION_TEMPLATE = (
    "Your last {count} attempts failed:\n{errors}\nTry another tool, other arguments, or answer with what you know."
)


def check_finish(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    left = state.get("iterations_left")
    counted: dict[str, Any] = {
        "iteration": state.get("iteration", 0) + 1,
        "iterations_left": (ctx.settings.max_iterations if left is None else left) - 1,
    }
    after = cast(RunState, {**state, **counted})
    reason = next((entry.reason for entry in BREAKERS if entry.trips(after, ctx.settings)), None)
    if reason == "answered":
        return {"iteration": counted["iteration"], "final_answer": state["decision"]["answer"], "finish_reason": reason}
    update = {**counted, "finish_reason": reason, "final_answer": None}
    if reason is None and _reflection_due(state, ctx):
        errors = state.get("consecutive_errors", 0)
        lines = _listed(state.get("streak_errors") or [])
        update.update(reflection=REFLECTION_TEMPLATE.format(count=errors, errors=lines), reflected_at=errors)
    return update


def _listed(errors: list[str]) -> str:
    """The streak's errors, one line each, an error that came more than once listed once with its count."""
    counts = Counter(errors)
    return "\n".join(f"- {line}" + (f" ({counts[line]} times)" if counts[line] > 1 else "") for line in counts)


def _reflection_due(state: AgentState, ctx: AgentContext) -> bool:
    """The error streak reached its limit for the first time: one reflection turn before error_streak."""
    errors, settings = state.get("consecutive_errors", 0), ctx.settings
    return settings.error_reflection and errors >= settings.error_threshold and state.get("reflected_at") is None
