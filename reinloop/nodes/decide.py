"""decide: ask the model for the next decision, within the context token budget.

Reads `task`, `messages` (the window), `summaries`, `pending`, `correction`, `usage`, and recalls
long-term memories from the store. Writes `decision`, `correction` (cleared), `last_call`, `usage` and,
when the reply parses, appends it to `messages` with its thought cut to `thought_max_chars`. Outcomes: an
"act" or "answer" decision, or an "unparsable" one whose raw text stays out of the window (validate_args
chooses between a retry and error feedback). Before the call it checks that every tool call in the window
has its result, and cuts the prompt harder if it is still over budget. A thread whose previous run
finished starts a new run here: its per-run counters are reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from reinloop.context import AgentContext
from reinloop.memory.long_term import memory_namespace, recall
from reinloop.memory.usage import add_usage, call_usage
from reinloop.memory.window import pairing_violations, truncate
from reinloop.prompt import fit_to_budget
from reinloop.state import FRESH_BUDGETS, NO_USAGE, AgentState

__all__ = ["build_prompt", "decide"]

# The latest observation is cut to this length when it joins the task in the recall query.
RECALL_QUERY_CHARS = 1_000


def decide(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: Optional[BaseStore] = None,  # noqa: UP045 - LangGraph injects the store by this exact annotation
) -> dict[str, Any]:
    task = state.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ValueError('the agent needs a task: invoke it with {"task": "..."}')
    new_run = state.get("finish_reason") is not None
    prompt, counted = build_prompt(state, ctx, _recall(state, ctx, config, store))
    reply = ctx.model.invoke(prompt)
    decision, stored = ctx.protocol.parse(reply, ctx.registry)
    last_call = call_usage("decide", reply, counted, ctx.counter)
    usage = NO_USAGE if new_run else state.get("usage", NO_USAGE)
    update: dict[str, Any] = {"decision": decision, "correction": None}
    if stored is not None:
        update["messages"] = [_short_thought(stored, ctx.config.thought_max_chars)]
    if new_run:
        update.update(FRESH_BUDGETS, iteration=0)
    update["last_call"] = last_call
    update["usage"] = add_usage(usage, last_call)
    return update


def build_prompt(state: AgentState, ctx: AgentContext, memories: Sequence[str] = ()) -> tuple[list[BaseMessage], int]:
    """Exactly what the model is sent, cut to the context token budget if needed, and its tokens."""
    window = state.get("messages", [])
    if problems := pairing_violations(window):
        raise RuntimeError(f"the window breaks the call/result pairing: {'; '.join(problems)}")
    return fit_to_budget(
        ctx,
        state["task"],
        window,
        summaries=state.get("summaries") or [],
        pending=state.get("pending") or [],
        memories=memories,
        correction=state.get("correction"),
    )


def _recall(state: AgentState, ctx: AgentContext, config: RunnableConfig, store: BaseStore | None) -> list[str]:
    if store is None or ctx.config.recall_k <= 0:
        return []
    latest = next((m.text for m in reversed(state.get("messages", [])) if isinstance(m, ToolMessage)), "")
    queries = [state["task"], latest[:RECALL_QUERY_CHARS]]
    memories = recall(store, memory_namespace(config), queries, ctx.config.recall_k)
    return [truncate(text, ctx.config.summary_max_chars) for text in memories]


def _short_thought(message: AIMessage, max_chars: int) -> AIMessage:
    # Only the reasoning beside tool calls is cut: a final answer is kept whole. List content (provider
    # blocks, e.g. signed reasoning) is left as is, since changing it can invalidate it.
    if message.tool_calls and isinstance(message.content, str) and len(message.content) > max_chars:
        return message.model_copy(update={"content": truncate(message.content, max_chars)})
    return message
