"""The token budget (`token_budget`): the run ends once its model calls used `budget` tokens.

Its state: `usage`, which decide and compress_memory add to (a fresh budget resets it); its setting: `budget`
(`AgentConfig.run_token_budget`; None: no limit). Prompt tokens the provider served from its cache, or wrote
to it, count whole: the budget bounds the tokens a run makes the model read and write, which is what
`reinloop.bounds` promises and what a context or rate limit counts, not a price that changes by provider.
"""

from __future__ import annotations

from typing import ClassVar

from reinloop.guards.base import Guard, Stop, at_least
from reinloop.state import NO_USAGE, RunState
from reinloop.text import counted

__all__ = ["TokenBudget"]


class TokenBudget(Guard):
    name = "token_budget"
    exit_code = 6
    initial: ClassVar = {"usage": NO_USAGE}

    def __init__(self, budget: int | None = None) -> None:
        if budget is not None:
            at_least("TokenBudget", budget=(budget, 1))
        self.budget = budget

    def check(self, state: RunState) -> Stop | None:
        tokens = state.get("usage", NO_USAGE)["total_tokens"]
        if self.budget is None or tokens < self.budget:
            return None
        rounds = counted(state.get("iteration", 0), "round")
        return Stop(f"Stopped: the run used {tokens} tokens after {rounds} (the budget is {self.budget}).")
