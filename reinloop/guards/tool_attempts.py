"""The tool-attempt budget (`max_tool_attempts`): the tool runs a run may make, retries included.

validate_args gives each call ready to run its attempts (`tool_attempts` for a retryable tool, else one);
this guard's `judge` cuts them to what is left of the budget: each call of the round gets its first attempt,
in order, before any gets a retry, and a call for which not even one is left is refused (`over_budget`), so
that the budget holds. Its `observe` adds the round's runs to `tool_attempts`; the run ends once they reach
the limit: `max_tool_attempts`, or `tool_attempts` per round of the iteration budget (then the rounds end the
run first). Its state: `tool_attempts`; its settings: `max_tool_attempts`, `tool_attempts`, `max_iterations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reinloop.guards.base import Guard, Round
from reinloop.guards.max_iterations import rounds_used_up
from reinloop.state import AgentState, CallCheck, RunState, runs
from reinloop.text import counted

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["OVER_BUDGET_TEMPLATE", "ToolAttempts", "tool_attempt_limit"]

OVER_BUDGET_TEMPLATE = (
    "Error: not run. This run has made all the {limit} tool calls it may make. Give your final answer with "
    "what you already know."
)


def tool_attempt_limit(state: AgentState, ctx: AgentContext) -> int:
    """The tool runs this run may make: `max_tool_attempts`, or `tool_attempts` per round of the iteration
    budget, whose rounds are those done and those left (the same all through a run)."""
    settings = ctx.settings
    if settings.max_tool_attempts is not None:
        return settings.max_tool_attempts
    left = state.get("iterations_left")
    rounds = state.get("iteration", 0) + (settings.max_iterations if left is None else left)
    return settings.tool_attempts * rounds


class ToolAttempts(Guard):
    name = reason = "max_tool_attempts"
    exit_code = 7
    template = "Stopped: the run made {tool_calls}, retries included, in {rounds} (the limit is {max_tool_attempts})."

    @property
    def fresh(self) -> dict[str, Any]:
        return {"tool_attempts": 0}

    def judge(self, checks: list[CallCheck], state: AgentState, ctx: AgentContext) -> list[CallCheck]:
        limit = tool_attempt_limit(state, ctx)
        left = limit - state.get("tool_attempts", 0)
        spare = left - sum(runs(check) for check in checks)  # attempts left for retries
        allotted: list[CallCheck] = []
        for check in checks:
            if runs(check) and left <= 0:
                message = OVER_BUDGET_TEMPLATE.format(limit=limit)
                check = {**check, "error_kind": "over_budget", "error": message, "attempts": 0}
            elif runs(check):
                retries = min(check["attempts"] - 1, max(spare, 0))
                left, spare = left - 1, spare - retries
                check = {**check, "attempts": 1 + retries}
            allotted.append(check)
        return allotted

    def observe(self, state: AgentState, round: Round, ctx: AgentContext) -> dict[str, Any]:
        if round.parse_error is not None:
            return {}
        # An outcome saved by a version that did not count attempts ran once.
        made = sum(outcome.get("attempts", 1) for outcome in round.outcomes)
        return {"tool_attempts": state.get("tool_attempts", 0) + made}

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        # judge gives no call more attempts than are left, so the count reaches the limit at most.
        if ctx.settings.max_tool_attempts is None and rounds_used_up(state):
            return False  # the default budget is tool_attempts per round: used up with the rounds, the rounds ended it
        return state.get("tool_attempts", 0) >= tool_attempt_limit(state, ctx)

    def fields(self, state: AgentState, ctx: AgentContext) -> dict[str, Any]:
        made = state.get("tool_attempts", 0)
        return {
            "tool_attempts": made,
            "tool_calls": counted(made, "tool call"),
            "max_tool_attempts": tool_attempt_limit(state, ctx),
        }
