"""decide: ask the model for the next decision.

Reads `task`, `messages` (the window), `correction`. Writes `decision`, `correction` (cleared) and, when
the reply parses, appends it to `messages`. Outcomes: an "act" or "answer" decision, or an "unparsable"
one whose raw text stays out of the window (validate_args chooses between a retry and error feedback).
A thread whose previous run finished starts a new run here: its per-run counters are reset.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from reinloop.context import AgentContext
from reinloop.state import AgentState

__all__ = ["decide"]

# Per-run counters, reset when a finished thread receives a new task.
_NEW_RUN: dict[str, Any] = {
    "iteration": 0,
    "iterations_left": None,
    "consecutive_errors": 0,
    "parse_retries": 0,
    "recent_calls": [],
    "final_answer": None,
    "finish_reason": None,
}


def decide(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    task = state.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ValueError('the agent needs a task: invoke it with {"task": "..."}')
    reply = ctx.model.invoke(build_prompt(state, ctx))
    decision, stored = ctx.protocol.parse(reply, ctx.registry)
    update: dict[str, Any] = {"decision": decision, "correction": None}
    if stored is not None:
        update["messages"] = [stored]
    if state.get("finish_reason") is not None:
        update.update(_NEW_RUN)
    return update


def build_prompt(state: AgentState, ctx: AgentContext) -> list[BaseMessage]:
    """Exactly what the model is sent: system prompt, task, rendered window, pending correction."""
    prompt: list[BaseMessage] = [
        SystemMessage(ctx.system_prompt),
        HumanMessage(state["task"]),
        *ctx.protocol.render(state.get("messages", [])),
    ]
    if correction := state.get("correction"):
        prompt.append(HumanMessage(correction))
    return prompt
