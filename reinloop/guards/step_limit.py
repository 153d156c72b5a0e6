"""The caller's step limit (`step_limit`): the run ends, resumably, before LangGraph's recursion limit would.

The recursion limit a run is invoked with is the caller's, not the agent's (batch, pipes and astream_events
pass LangChain's default of 25); when the steps left (`remaining_steps`, a LangGraph managed value) cannot
hold another round and a circuit break, the run stops here instead of failing with GraphRecursionError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reinloop.config import AgentConfig, round_steps
from reinloop.guards.base import Guard
from reinloop.state import AgentState, RunState

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["StepLimit", "steps_to_stop"]


def steps_to_stop(settings: AgentConfig) -> int:
    """The `remaining_steps` check_finish needs to go on: one more full round, then a circuit break if that
    round trips a breaker. `remaining_steps` counts the step that reads it, and LangGraph raises
    GraphRecursionError after a step that had 0 left even if it was the last, hence the 2."""
    return round_steps(settings.max_parse_retries) + 2


class StepLimit(Guard):
    name = reason = "step_limit"
    exit_code = 8
    template = (
        "Stopped: no final answer after {rounds}; the recursion_limit this run was invoked with leaves "
        "too few LangGraph steps for another round (one takes up to {round_steps}). batch, pipes and "
        "astream_events pass LangChain's default of 25: give a higher recursion_limit in the config, or none."
    )

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        left = state.get("remaining_steps")
        return left is not None and left < steps_to_stop(ctx.settings)

    def fields(self, state: AgentState, ctx: AgentContext) -> dict[str, Any]:
        return {"round_steps": round_steps(ctx.settings.max_parse_retries)}
