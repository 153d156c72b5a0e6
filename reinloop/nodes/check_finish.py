"""check_finish: count the round and decide whether the run goes on.

Reads `iteration` and `iterations_left`, what the breakers' predicates read (`reinloop.breakers`):
`decision`, `checks`, `consecutive_errors`, `reflected_at`, `replans`, `usage`, `tool_attempts`, `streak_errors` and
LangGraph's `remaining_steps`. Writes `iteration`, `iterations_left` (left as it was when answered),
`finish_reason` and `final_answer` (None unless answered), and, for a reflection turn, `reflection` and
`reflected_at`, and for a re-plan turn `replans`, `consecutive_errors`, `streak_errors` and `call_window`.
Outcomes: the first entry of `BREAKERS` that trips, in table order: answered; dead_loop (a call the model
kept repeating after it was answered from cache or refused was refused this round, before it ran);
error_streak (the errors continued after the reflection turn), each replaced by a re-plan turn while
`max_replans` allows (the next decision is shown what kept failing; the streak and the repeat guards'
record start afresh); token_budget (`usage` reached
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

__all__ = ["REFLECTION_TEMPLATE", "REPLANNED", "REPLAN_TEMPLATE", "check_finish"]

REFLECTION_TEMPLATE = (
    "Your last {count} attempts failed:\n{errors}\nTry another tool, other arguments, or answer with what you know."
)
REPLAN_TEMPLATE = (
    "Re-plan ({replan} of {replans}): {what}\n{errors}\nThose attempts will not work. Make a new plan from what "
    "you know: use another tool or other arguments, or answer. {left}"
)
# The stops a re-plan turn is granted in place of (max_replans), and what the turn says happened.
REPLANNED: dict[str, str] = {
    "error_streak": "your attempts keep failing:",
    "dead_loop": "you keep repeating a call that was refused:",
}


def check_finish(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    left = state.get("iterations_left")
    counted: dict[str, Any] = {
        "iteration": state.get("iteration", 0) + 1,
        "iterations_left": (ctx.settings.max_iterations if left is None else left) - 1,
    }
    after = cast(RunState, {**state, **counted})
    replan: str | None = None  # the stop a re-plan turn replaces, if one does
    reason = None
    for entry in BREAKERS:
        if not entry.trips(after, ctx.settings):
            continue
        if entry.reason in REPLANNED and replan is None and state.get("replans", 0) < ctx.settings.max_replans:
            replan = entry.reason  # and a later breaker (the budgets) may still end the run
            continue
        reason = entry.reason
        break
    if reason == "answered":
        return {"iteration": counted["iteration"], "final_answer": state["decision"]["answer"], "finish_reason": reason}
    update = {**counted, "finish_reason": reason, "final_answer": None}
    if reason is None and replan is not None:
        update.update(_replan(state, replan, ctx))
    elif reason is None and _reflection_due(state, ctx):
        errors = state.get("consecutive_errors", 0)
        lines = _listed(state.get("streak_errors") or [])
        update.update(reflection=REFLECTION_TEMPLATE.format(count=errors, errors=lines), reflected_at=errors)
    return update


def _replan(state: RunState, stop: str, ctx: AgentContext) -> dict[str, Any]:
    """A re-plan turn in place of the `stop` that tripped: the next decision is shown what kept failing, and
    the error streak and the repeat guards' record of recent calls start afresh."""
    replan, replans = state.get("replans", 0) + 1, ctx.settings.max_replans
    if stop == "dead_loop":
        lines = [f"{check['name']}: {check['error']}" for check in state.get("checks", []) if check["error"]]
    else:
        lines = list(state.get("streak_errors") or [])
    more = replans - replan
    left = f"{more} more re-plan{'s are' if more > 1 else ' is'} left." if more else "If this goes on, the run stops."
    text = REPLAN_TEMPLATE.format(
        replan=replan, replans=replans, what=REPLANNED[stop], errors=_listed(lines), left=left
    )
    fresh = {"consecutive_errors": 0, "streak_errors": [], "reflected_at": None, "call_window": []}
    return {**fresh, "reflection": text, "replans": replan}


def _listed(errors: list[str]) -> str:
    """The streak's errors, one line each, an error that came more than once listed once with its count."""
    counts = Counter(errors)
    return "\n".join(f"- {line}" + (f" ({counts[line]} times)" if counts[line] > 1 else "") for line in counts)


def _reflection_due(state: AgentState, ctx: AgentContext) -> bool:
    """The error streak reached its limit for the first time: one reflection turn before error_streak."""
    errors, settings = state.get("consecutive_errors", 0), ctx.settings
    return settings.error_reflection and errors >= settings.error_threshold and state.get("reflected_at") is None
