"""check_finish: count the round and decide whether the run goes on.

Reads `iteration` and `iterations_left`, and what the breakers' predicates read (`reinloop.breakers`):
`decision`, `checks`, `consecutive_errors`, `usage`. Writes `iteration`, `iterations_left` (left as it was
when answered), `finish_reason` and `final_answer` (None unless answered). Outcomes: the first entry of
`BREAKERS` that trips, in table order: answered; dead_loop (a call the model kept repeating after it was
answered from cache or refused was refused this round, before it ran); error_streak; token_budget (`usage`
reached `run_token_budget`); max_iterations; or go on (`finish_reason` None).
"""

from __future__ import annotations

from typing import Any, cast

from reinloop.breakers import BREAKERS
from reinloop.context import AgentContext
from reinloop.state import AgentState

__all__ = ["check_finish"]


def check_finish(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    left = state.get("iterations_left")
    counted: dict[str, Any] = {
        "iteration": state.get("iteration", 0) + 1,
        "iterations_left": (ctx.settings.max_iterations if left is None else left) - 1,
    }
    after = cast(AgentState, {**state, **counted})
    reason = next((entry.reason for entry in BREAKERS if entry.trips(after, ctx.settings)), None)
    if reason == "answered":
        return {"iteration": counted["iteration"], "final_answer": state["decision"]["answer"], "finish_reason": reason}
    return {**counted, "finish_reason": reason, "final_answer": None}
