"""The tool-attempt budget (`max_tool_attempts`): the tool runs a run may make, retries included.

validate_args gives each call ready to run its attempts (`tool_attempts` for a retryable tool, else one);
this guard's `judge` cuts them to what is left of the budget: each call of the round gets its first attempt,
in order, before any gets a retry, and a call for which not even one is left is refused (`over_budget`), so
that the budget holds. Its `observe` adds the round's runs to `tool_attempts`; the run ends once they reach
the limit: `max_tool_attempts`, or `tool_attempts` per round of the iteration budget (then the rounds end the
run first).
"""

from __future__ import annotations

from typing import ClassVar

from reinloop.guards.base import Guard, Round, Stop, at_least, refuse
from reinloop.guards.max_iterations import rounds_used_up
from reinloop.state import AgentState, CallCheck, RunState, runs
from reinloop.text import counted

__all__ = ["OVER_BUDGET_TEMPLATE", "ToolAttempts"]

OVER_BUDGET_TEMPLATE = (
    "Error: not run. This run has made all the {limit} tool calls it may make. Give your final answer with "
    "what you already know."
)


class ToolAttempts(Guard):
    name = "max_tool_attempts"
    exit_code = 7
    initial: ClassVar = {"tool_attempts": 0}

    def __init__(self, max_tool_attempts: int | None = None, tool_attempts: int = 3, max_iterations: int = 20) -> None:
        at_least("ToolAttempts", tool_attempts=(tool_attempts, 1), max_iterations=(max_iterations, 1))
        if max_tool_attempts is not None:
            at_least("ToolAttempts", max_tool_attempts=(max_tool_attempts, 1))
        self.max_tool_attempts, self.tool_attempts, self.max_iterations = (
            max_tool_attempts,
            tool_attempts,
            max_iterations,
        )

    def limit(self, state: AgentState) -> int:
        """The tool runs this run may make: `max_tool_attempts`, or `tool_attempts` per round of the iteration
        budget, whose rounds are those done and those left (the same all through a run)."""
        if self.max_tool_attempts is not None:
            return self.max_tool_attempts
        left = state.get("iterations_left")
        return self.tool_attempts * (state.get("iteration", 0) + (self.max_iterations if left is None else left))

    def judge(self, calls: list[CallCheck], state: AgentState) -> list[CallCheck]:
        limit = self.limit(state)
        left = limit - state.get("tool_attempts", 0)
        spare = left - sum(runs(call) for call in calls)  # attempts left for retries
        allotted: list[CallCheck] = []
        for call in calls:
            if runs(call) and left <= 0:
                call = refuse(call, OVER_BUDGET_TEMPLATE.format(limit=limit), "over_budget")
            elif runs(call):
                retries = min(call["attempts"] - 1, max(spare, 0))
                left, spare = left - 1, spare - retries
                call = {**call, "attempts": 1 + retries}
            allotted.append(call)
        return allotted

    def observe(self, round: Round, state: AgentState) -> dict[str, int]:
        if round.parse_error is not None:
            return {}
        # An outcome saved by a version that did not count attempts ran once.
        made = sum(outcome.get("attempts", 1) for outcome in round.outcomes)
        return {"tool_attempts": state.get("tool_attempts", 0) + made}

    def check(self, state: RunState) -> Stop | None:
        if self.max_tool_attempts is None and rounds_used_up(state):
            return None  # the default budget is tool_attempts per round: used up with the rounds, the rounds end it
        # judge gives no call more attempts than are left, so the count reaches the limit at most.
        made, limit = state.get("tool_attempts", 0), self.limit(state)
        if made < limit:
            return None
        rounds = counted(state.get("iteration", 0), "round")
        return Stop(
            f"Stopped: the run made {counted(made, 'tool call')}, retries included, in {rounds} (the limit is {limit})."
        )
