"""decide's turn with the middleware: before_agent, before_model, the model call, after_model, over the state as
the hooks see it (the task as the first HumanMessage, then the window), and what their changes come to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.runtime import Runtime, get_runtime

from reinloop.drivers import Steps
from reinloop.middleware.hooks import MAX_MODEL_JUMPS, STOPPED_TEMPLATE, TASK_MESSAGE_ID, UNUSED_KEYS, Jump, NodeHook

if TYPE_CHECKING:
    from reinloop.context import AgentContext
    from reinloop.middleware.hooks import Middleware

__all__ = ["ModelTurn", "current_runtime", "model_turn", "rewritten"]


@dataclass
class ModelTurn:
    """What decide's model call came to with the hooks around it."""

    replies: list[tuple[BaseMessage, list[BaseMessage]]] = field(default_factory=list)  # each reply and its prompt
    stop: str | None = None  # a hook ended the run (jump_to "end"): its message
    task: str | None = None  # the task as the hooks left it, when they changed it
    window: list[AnyMessage] | None = None  # the window as the hooks left it, when they changed it
    blocked: dict[str, str] = field(default_factory=dict)  # calls of the reply a hook answered: their messages
    written: dict[str, Any] = field(default_factory=dict)  # the hooks' other state changes


class _View:
    """The state as middleware sees it, with the hooks' changes applied as create_agent's reducers would."""

    def __init__(self, state: dict[str, Any]) -> None:
        task = HumanMessage(state.get("task", ""), id=TASK_MESSAGE_ID)
        self.window = list(state.get("messages", []))
        self.values: dict[str, Any] = {**state, "messages": [task, *self.window]}
        self.written: dict[str, Any] = {}
        self.stopped_by: str | None = None

    def apply(self, item: AgentMiddleware[Any, Any, Any], update: Any) -> Jump | None:
        if not update:
            return None
        update = dict(update)
        jump = update.pop("jump_to", None)
        if "messages" in update:
            self.values["messages"] = add_messages(self.values["messages"], update.pop("messages"))
        self.values.update(update)
        self.written.update({key: value for key, value in update.items() if key not in UNUSED_KEYS})
        if jump == "end":
            self.stopped_by = item.name
        return jump  # type: ignore[no-any-return]

    def stop_text(self, since: int) -> str:
        added = [m for m in self.values["messages"][since:] if isinstance(m, AIMessage) and m.text]
        return added[-1].text if added else STOPPED_TEMPLATE.format(name=self.stopped_by)

    def message(self, message_id: str | None) -> BaseMessage | None:
        return next((m for m in self.values["messages"] if m.id == message_id), None)


def model_turn(
    middleware: Middleware,
    ctx: AgentContext,
    state: dict[str, Any],
    prompt_for: Callable[[dict[str, Any]], list[BaseMessage]],
    starts: bool,
    cache_key: str | None = None,
) -> Steps[ModelTurn]:
    """decide's model call with the hooks around it: before_agent (when the run `starts`), before_model, the
    model through wrap_model_call, after_model. `prompt_for` builds the prompt from the state as the hooks left
    it; `cache_key` is the thread's prompt cache key (`reinloop.models.caching`)."""
    runtime = current_runtime()
    view, turn = _View(state), ModelTurn()
    if starts and (yield from _hooks(middleware, "before_agent", view, runtime)) == "end":
        turn.stop = view.stop_text(0)
        return _finish(turn, view, state)
    for _ in range(MAX_MODEL_JUMPS + 1):
        since = len(view.values["messages"])
        if (yield from _hooks(middleware, "before_model", view, runtime)) == "end":
            turn.stop = view.stop_text(since)
            return _finish(turn, view, state)
        prompt = prompt_for(_shown(state, view))
        reply = yield from middleware.call_model(ctx, prompt, view.values, runtime, cache_key)
        if reply.id is None:
            reply = reply.model_copy(update={"id": f"run-{uuid4()}"})
        turn.replies.append((reply, prompt))
        at = len(view.values["messages"])
        view.values["messages"] = [*view.values["messages"], reply]
        jump = yield from _hooks(middleware, "after_model", view, runtime)
        if jump == "end":
            turn.stop = view.stop_text(at + 1)
            return _finish(turn, view, state)
        if jump != "model":
            return _finish(turn, view, state, reply)
        view.values["messages"] = view.values["messages"][:at]  # asked again: this reply is not the decision
    return _finish(turn, view, state)


def _hooks(middleware: Middleware, hook: NodeHook, view: _View, runtime: Any) -> Steps[Jump | None]:
    """Run `hook` of each middleware that has it (after_model in reverse order), until one jumps: "end", or
    "model" from after_model."""
    items = middleware.with_hook(hook)
    for item in reversed(items) if hook == "after_model" else items:
        jump = view.apply(item, (yield from middleware.node_hook(item, hook, view.values, runtime)))
        if jump == "end" or (jump == "model" and hook == "after_model"):
            return jump
    return None


def _shown(state: dict[str, Any], view: _View) -> dict[str, Any]:
    """`state` with the task and window as the hooks left them, for the prompt."""
    task, window = _task_and_window(view.values["messages"], state)
    return {**state, **view.written, "task": task, "messages": window}


def _task_and_window(messages: list[AnyMessage], state: dict[str, Any]) -> tuple[str, list[AnyMessage]]:
    task = next((m.text for m in messages if m.id == TASK_MESSAGE_ID), state.get("task", ""))
    return task, [m for m in messages if m.id != TASK_MESSAGE_ID]


def _finish(turn: ModelTurn, view: _View, state: dict[str, Any], reply: BaseMessage | None = None) -> ModelTurn:
    messages = view.values["messages"]
    turn.written = view.written
    if reply is not None:
        final = view.message(reply.id) or reply
        turn.replies[-1] = (final, turn.replies[-1][1])
        calls = {call["id"] for call in getattr(final, "tool_calls", [])}
        turn.blocked = {
            m.tool_call_id: m.text for m in messages if isinstance(m, ToolMessage) and m.tool_call_id in calls
        }
        after = [m.id for m in messages].index(final.id)
        messages = messages[:after]
    if turn.stop is not None:
        return turn
    task, window = _task_and_window(messages, state)
    if task != state.get("task"):
        turn.task = task
    if [(m.id, m.content) for m in window] != [(m.id, m.content) for m in view.window]:
        turn.window = window
    return turn


def rewritten(window: list[AnyMessage]) -> list[Any]:
    """The write that replaces the saved window with `window`."""
    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window]


def current_runtime() -> Runtime[Any]:
    """LangGraph's runtime of the running node; an empty one outside a graph (a node called directly)."""
    try:
        return get_runtime()
    except RuntimeError:
        return Runtime()
