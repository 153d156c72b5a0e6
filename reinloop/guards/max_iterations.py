"""The iteration budget (`max_iterations`): the run ends once its rounds are used up.

check_finish counts the rounds (`iterations_left`, from `AgentConfig.max_iterations`, or a resume's extra
iterations); this guard ends the run when none is left.
"""

from __future__ import annotations

from typing import ClassVar

from reinloop.guards.base import Guard, Stop
from reinloop.state import RunState
from reinloop.text import counted

__all__ = ["MaxIterations", "rounds_used_up"]


def rounds_used_up(state: RunState) -> bool:
    left = state.get("iterations_left")
    return left is not None and left <= 0


class MaxIterations(Guard):
    name = "max_iterations"
    exit_code = 3
    initial: ClassVar = {"iterations_left": None}

    def check(self, state: RunState) -> Stop | None:
        if not rounds_used_up(state):
            return None
        rounds = counted(state.get("iteration", 0), "round")
        return Stop(f"Stopped: no final answer after {rounds}; the iteration budget is used up.")
