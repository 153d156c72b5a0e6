"""The caller's step limit (`step_limit`): the run ends, resumably, before LangGraph's recursion limit would.

The recursion limit a run is invoked with is the caller's, not the agent's (batch, pipes and astream_events
pass LangChain's default of 25); when the steps left (`remaining_steps`, a LangGraph managed value) cannot
hold another round and a circuit break, the run stops here instead of failing with GraphRecursionError.
"""

from __future__ import annotations

from reinloop.config import round_steps
from reinloop.guards.base import Guard, Stop, at_least
from reinloop.state import RunState
from reinloop.text import counted

__all__ = ["StepLimit", "steps_to_stop"]

TEMPLATE = (
    "Stopped: no final answer after {rounds}; the recursion_limit this run was invoked with leaves "
    "too few LangGraph steps for another round (one takes up to {round_steps}). batch, pipes and "
    "astream_events pass LangChain's default of 25: give a higher recursion_limit in the config, or none."
)


def steps_to_stop(max_parse_retries: int) -> int:
    """The `remaining_steps` check_finish needs to go on: one more full round, then a circuit break if that
    round trips a breaker. `remaining_steps` counts the step that reads it, and LangGraph raises
    GraphRecursionError after a step that had 0 left even if it was the last, hence the 2."""
    return round_steps(max_parse_retries) + 2


class StepLimit(Guard):
    name = "step_limit"
    exit_code = 8

    def __init__(self, max_parse_retries: int = 1) -> None:
        at_least("StepLimit", max_parse_retries=(max_parse_retries, 0))
        self.round_steps, self.needed = round_steps(max_parse_retries), steps_to_stop(max_parse_retries)

    def check(self, state: RunState) -> Stop | None:
        left = state.get("remaining_steps")
        if left is None or left >= self.needed:
            return None
        rounds = counted(state.get("iteration", 0), "round")
        return Stop(TEMPLATE.format(rounds=rounds, round_steps=self.round_steps))
