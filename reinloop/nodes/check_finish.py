"""check_finish: count the round and decide whether the run goes on.

Reads `decision`, `checks`, `consecutive_errors`, `usage`, `iteration`, `iterations_left`. Writes `iteration`,
`iterations_left`, `finish_reason` and `final_answer` (None unless answered). Outcomes, in priority order:
answered; dead_loop (a repeated call was refused this round, before it ran); error_streak; token_budget
(`usage` reached `run_token_budget`); max_iterations; or go on (`finish_reason` None).
"""

from __future__ import annotations

from typing import Any

from reinloop.context import AgentContext
from reinloop.state import NO_USAGE, AgentState, FinishReason

__all__ = ["check_finish"]


def check_finish(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    iteration = state.get("iteration", 0) + 1
    decision = state["decision"]
    if decision["kind"] == "answer":
        return {"iteration": iteration, "final_answer": decision["answer"], "finish_reason": "answered"}
    left = state.get("iterations_left")
    left = (ctx.settings.max_iterations if left is None else left) - 1
    budget = ctx.settings.run_token_budget
    reason: FinishReason | None = None
    if any(check["error_kind"] == "repeated_call" for check in state.get("checks", [])):
        reason = "dead_loop"
    elif state.get("consecutive_errors", 0) >= ctx.settings.error_threshold:
        reason = "error_streak"
    elif budget is not None and state.get("usage", NO_USAGE)["total_tokens"] >= budget:
        reason = "token_budget"
    elif left <= 0:
        reason = "max_iterations"
    return {"iteration": iteration, "iterations_left": left, "finish_reason": reason, "final_answer": None}
