"""The context budget: the tokens one model call may be sent.

`AgentConfig.context_token_budget` when set; by default the fixed part of every prompt (system prompt,
protocol instructions, tool schemas) plus `MEMORY_TOKENS` for the task, memory note and window, within the
model's input window (its LangChain profile's ``max_input_tokens``). `build_agent` resolves it once and refuses
a budget that leaves the memory too little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MEMORY_TOKENS", "MIN_MEMORY_TOKENS", "ContextBudget", "input_window"]

# What the task, memory note and window get by default, whatever the toolset: the budget before the fixed part
# was counted on top of it (6,000 in all for five tools), so large toolsets add their schemas instead of
# crowding the memory out.
MEMORY_TOKENS = 6_000
# The least room a budget must leave the memory: as much as the fixed part, up to this (a few window entries,
# the summaries and the recalled memories); below it a run would compact every round.
MIN_MEMORY_TOKENS = 2_000


def input_window(model: Any) -> int | None:
    """The most input tokens `model` takes, from its LangChain model profile (``BaseChatModel.profile``, filled
    by integrations such as langchain-openai for the models they know); None when it does not say."""
    profile = getattr(model, "profile", None)
    window = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return window if isinstance(window, int) and window > 0 else None


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """One agent's context budget and what it was resolved from."""

    tokens: int  # what one model call may be sent
    fixed: int  # what every call sends whatever the memory holds: system prompt, instructions, tool schemas
    window: int | None  # the model's input window, when its profile says
    given: bool  # set as AgentConfig.context_token_budget, taken as it is

    @classmethod
    def of(cls, given: int | None, fixed: int, window: int | None) -> ContextBudget:
        """`given`, or the fixed part plus the memory's share, capped by the model's input `window`."""
        if given is not None:
            return cls(given, fixed, window, True)
        wanted = fixed + MEMORY_TOKENS
        return cls(wanted if window is None else min(wanted, window), fixed, window, False)

    @property
    def memory(self) -> int:
        """What is left for the task, the memory note and the window."""
        return self.tokens - self.fixed

    def problem(self) -> str | None:
        """Why the budget cannot hold a run (the memory's room under `MIN_MEMORY_TOKENS` and under the fixed
        part), with what to do; None when it can."""
        need = min(self.fixed, MIN_MEMORY_TOKENS)
        if self.memory >= need:
            return None
        window = f"the model's input window ({self.window or 0:,} tokens, its profile's max_input_tokens)"
        of = f"context_token_budget={self.tokens}" if self.given else window
        what = f"the system prompt and tool schemas alone take {self.fixed:,} tokens"
        if self.memory <= 0:
            what += f", more than {of}"
        else:
            what += (
                f" of {of}, leaving {self.memory:,} for the task and memory, which need at least {need:,} (as "
                f"many as the fixed part, up to {MIN_MEMORY_TOKENS:,})"
            )
        if not self.given:
            advice = "pass fewer tools (those the task needs), use a model with a larger input window"
            return f"{what}: {advice}, or a shorter system prompt"
        larger = f"raise context_token_budget to at least {self.fixed + need}"
        if self.window is not None:
            larger += f" (the model's profile takes up to {self.window:,} input tokens)"
        return f"{what}: {larger}, or pass fewer tools or a shorter system prompt"
