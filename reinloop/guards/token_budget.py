"""The token budget (`token_budget`): the run ends once its model calls used `run_token_budget` tokens.

Its state: `usage`, which decide and compress_memory add to (a fresh budget resets it); its setting:
`run_token_budget` of `AgentConfig` (None: no limit). Prompt tokens the provider served from its cache, or
wrote to it, count whole: the budget bounds the tokens a run makes the model read and write, which is what
`reinloop.bounds` promises and what a context or rate limit counts, not a price that changes by provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reinloop.guards.base import Guard
from reinloop.state import NO_USAGE, AgentState, RunState

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["TokenBudget"]


class TokenBudget(Guard):
    name = reason = "token_budget"
    exit_code = 6
    template = "Stopped: the run used {tokens} tokens after {rounds} (the budget is {budget})."

    @property
    def fresh(self) -> dict[str, Any]:
        return {"usage": NO_USAGE}

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        budget = ctx.settings.run_token_budget
        return budget is not None and state.get("usage", NO_USAGE)["total_tokens"] >= budget

    def fields(self, state: AgentState, ctx: AgentContext) -> dict[str, Any]:
        return {"budget": ctx.settings.run_token_budget}
