"""compress_memory: keep the short-term window bounded.

Reads `messages`. Writes `messages` (removals only): the oldest window entries beyond
`config.memory_capacity` are dropped whole, so a tool call never loses its result.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import RemoveMessage

from reinloop.context import AgentContext
from reinloop.memory.window import window_entries
from reinloop.state import AgentState

__all__ = ["compress_memory"]


def compress_memory(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    entries = window_entries(state.get("messages", []))
    excess = len(entries) - ctx.config.memory_capacity
    if excess <= 0:
        return {}
    return {"messages": [RemoveMessage(id=message.id) for entry in entries[:excess] for message in entry]}
