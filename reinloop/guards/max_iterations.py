"""The iteration budget (`max_iterations`): the run ends when its rounds are used up.

check_finish counts the rounds (`iteration`, and `iterations_left`, None for a fresh `max_iterations`, or
what a resume gave with `extra_iterations`); this guard reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reinloop.guards.base import Guard
from reinloop.state import RunState

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["MaxIterations", "rounds_used_up"]


def rounds_used_up(state: RunState) -> bool:
    left = state.get("iterations_left")
    return left is not None and left <= 0


class MaxIterations(Guard):
    name = reason = "max_iterations"
    exit_code = 3
    template = "Stopped: no final answer after {rounds}; the iteration budget is used up."

    @property
    def fresh(self) -> dict[str, Any]:
        return {"iterations_left": None}

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        return rounds_used_up(state)
