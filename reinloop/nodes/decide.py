"""decide: ask the model for the next decision, within the context token budget.

Reads `task`, `messages` (the window), `summaries`, `pending`, `recalled`, `reflection`, `correction`, `usage`,
and recalls long-term memories from the store when `recalled` is unset. Writes `decision`, `correction`
(cleared), `recalled`, `last_call`, `usage`, and when the reply parses `reflection` (cleared) and the reply,
appended to `messages` with its thought cut to `thought_max_chars`. Outcomes: an "act" or "answer" decision,
or an "unparsable" one (a reply an output limit cut, or a call a checkpointer cannot store) whose raw text,
cut to RAW_KEPT_CHARS, stays out of the window. A thread whose previous run finished starts a new run here:
its per-run counters are reset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from reinloop.context import AgentContext
from reinloop.drivers import Steps, adrive, drive, invoke
from reinloop.errors import InputError, InvariantError
from reinloop.memory.long_term import memory_namespace, recall_steps
from reinloop.memory.usage import add_usage, call_usage
from reinloop.memory.window import pairing_violations
from reinloop.middleware import ModelTurn, model_turn, rewritten
from reinloop.models.caching import bound_settings, cache_key, for_provider
from reinloop.prompt import fit_to_budget
from reinloop.protocols import read_reply
from reinloop.state import NO_USAGE, RAW_KEPT_CHARS, AgentState, Decision, stopped, unparsable
from reinloop.storable import MAX_ARGS_CHARS, MAX_DEPTH, args_problem, clean_text, clean_value, storage_problem
from reinloop.text import truncate
from reinloop.tools.selection import select_tools

__all__ = ["UNSTORABLE_ARGS_TEMPLATE", "adecide", "build_prompt", "decide"]

# The latest observation is cut to this length when it joins the task in the recall query.
RECALL_QUERY_CHARS = 1_000
# The error of a reply whose call cannot be saved: it is handled as an unparsable reply (a retry with this
# hint, or an error note), never saved, so a checkpointer never fails on it after the run went on.
UNSTORABLE_ARGS_TEMPLATE = (
    "the arguments of the {name!r} call hold {problem}; send them as plain JSON: integers of at most 64 bits "
    f"(larger numbers as strings), at most {MAX_DEPTH} levels of nesting, at most {MAX_ARGS_CHARS} characters"
)


def decide(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: Optional[BaseStore] = None,  # noqa: UP045 - LangGraph injects the store by this exact annotation
) -> dict[str, Any]:
    return drive(_decide(state, ctx, config, store))


async def adecide(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: Optional[BaseStore] = None,  # noqa: UP045 - LangGraph injects the store by this exact annotation
) -> dict[str, Any]:
    """`decide` under ainvoke/astream: awaits the store's searches and the model's `ainvoke`."""
    return await adrive(_decide(state, ctx, config, store))


def _decide(
    state: AgentState, ctx: AgentContext, config: RunnableConfig, store: BaseStore | None
) -> Steps[dict[str, Any]]:
    task = state.get("task")
    if not isinstance(task, str) or not task.strip():
        raise InputError('the agent needs a task: invoke it with {"task": "..."}')
    new_run = state.get("finish_reason") is not None
    # Recalled once for each memory note (a run's first decision, the first after a compaction), so that the
    # note stays the same, and cacheable, until the next compaction.
    recalled = None if new_run else state.get("recalled")
    memories = recalled if recalled is not None else (yield from _recall(state, ctx, config, store))
    selection, shown = None, None if new_run else state.get("tools")
    if (limit := _tools_to_pick(state, ctx, new_run)) is not None:
        selection = yield from select_tools(ctx.chat_model, task, ctx.registry, limit)
        shown = selection.names
    view = ctx.shown(shown)  # the context as the model sees it: only the run's tools
    key = cache_key(config)
    if view.middleware.around_model:
        turn, counts = yield from _model_turn(state, view, memories, new_run or "usage" not in state, key)
    else:
        prompt, counted = build_prompt(state, view, memories)
        sent, kwargs = for_provider(view.chat_model, prompt, key, bound_settings(view.model))
        turn, counts = ModelTurn(replies=[((yield from invoke(view.model, sent, **kwargs)), prompt)]), [counted]
    update = _decided(state, view, turn, counts, new_run)
    if recalled is None:
        update["recalled"] = memories
    if selection is not None:
        update["tools"] = selection.names
        if selection.reply is not None:
            chosen = call_usage("decide", selection.reply, ctx.counter.messages(selection.prompt), ctx.counter)
            update["usage"] = add_usage(update["usage"], chosen)
    elif new_run:
        update["tools"] = None
    return update


def _tools_to_pick(state: AgentState, ctx: AgentContext, new_run: bool) -> int | None:
    """How many tools this decision first picks for the run to show the model (`AgentConfig.max_tools`): at a
    run's first decision, when there are more tools than that; else None."""
    limit = ctx.settings.max_tools
    picks = limit is not None and len(ctx.registry) > limit and (new_run or "tools" not in state)
    return limit if picks else None


def _decided(state: AgentState, ctx: AgentContext, turn: ModelTurn, counts: list[int], new_run: bool) -> dict[str, Any]:
    """decide's update after its model call (`turn`, each reply's prompt tokens in `counts`)."""
    usage = NO_USAGE if new_run else state.get("usage", NO_USAGE)
    update: dict[str, Any] = {"correction": None, **turn.written}
    if turn.task is not None:
        update["task"] = clean_text(turn.task)
    for (reply, _), counted in zip(turn.replies, counts, strict=True):
        update["last_call"] = call_usage("decide", reply, counted, ctx.counter)
        usage = add_usage(usage, update["last_call"])
    if turn.stop is not None:
        decision, stored = stopped(clean_text(turn.stop)), None
    else:
        decision, stored = _storable(*read_reply(ctx.protocol, turn.replies[-1][0], ctx.registry))
        if turn.blocked and decision["kind"] == "act":
            decision = {**decision, "blocked": clean_value(turn.blocked)}
    update["decision"] = decision
    written: list[Any] = rewritten(turn.window) if turn.window is not None else []
    if stored is not None:
        written.append(_short_thought(stored, ctx.settings.thought_max_chars))
        if state.get("reflection") is not None:
            update["reflection"] = None
    if written:
        update["messages"] = written
    if new_run:
        update.update(ctx.fresh, iteration=0)
    update["usage"] = usage
    return update


def _model_turn(
    state: AgentState, ctx: AgentContext, memories: list[str], starts: bool, key: str | None
) -> Steps[tuple[ModelTurn, list[int]]]:
    """The model call with the middleware's hooks around it (`reinloop.middleware`); each reply with the
    tokens of its prompt. `key`: the thread's prompt cache key (`reinloop.models.caching`)."""
    counts: list[int] = []  # each prompt's tokens, in the order the model was called

    def prompt_for(shown: dict[str, Any]) -> list[BaseMessage]:
        prompt, counted = build_prompt(cast(AgentState, shown), ctx, memories)
        counts.append(counted)
        return prompt

    turn = yield from model_turn(ctx.middleware, ctx, dict(state), prompt_for, starts, key)
    return turn, counts


def build_prompt(state: AgentState, ctx: AgentContext, memories: Sequence[str] = ()) -> tuple[list[BaseMessage], int]:
    """Exactly what the model is sent, cut to the context token budget if needed, and its tokens."""
    window = state.get("messages", [])
    if problems := pairing_violations(window):
        raise InvariantError(f"the window breaks the call/result pairing: {'; '.join(problems)}")
    return fit_to_budget(
        ctx,
        state["task"],
        window,
        summaries=state.get("summaries") or [],
        pending=state.get("pending") or [],
        memories=memories,
        correction=state.get("correction"),
        reflection=state.get("reflection"),
    )


def _recall(state: AgentState, ctx: AgentContext, config: RunnableConfig, store: BaseStore | None) -> Steps[list[str]]:
    if store is None or ctx.settings.recall_k <= 0:
        return []
    latest = next((m.text for m in reversed(state.get("messages", [])) if isinstance(m, ToolMessage)), "")
    queries = [state["task"], latest[:RECALL_QUERY_CHARS]]
    memories = yield from recall_steps(store, memory_namespace(config), queries, ctx.settings.recall_k)
    return [truncate(text, ctx.settings.summary_max_chars) for text in memories]


def _short_thought(message: AIMessage, max_chars: int) -> AIMessage:
    # Only the reasoning beside tool calls is cut: a final answer is kept whole. List content (provider
    # blocks, e.g. signed reasoning) is left as is, since changing it can invalidate it.
    if message.tool_calls and isinstance(message.content, str) and len(message.content) > max_chars:
        return message.model_copy(update={"content": truncate(message.content, max_chars)})
    return message


def _storable(decision: Decision, stored: AIMessage | None) -> tuple[Decision, AIMessage | None]:
    """The decision and the reply message as they can be saved: a call whose arguments cannot be makes the
    reply unparsable, all text is cleaned, and an unparsable reply's text and error are cut."""
    for call in decision["calls"]:
        if problem := args_problem(call.get("args")):
            error = UNSTORABLE_ARGS_TEMPLATE.format(name=call["name"], problem=problem)
            decision, stored = unparsable(_quoted(call), error), None
            break
    if decision["kind"] == "unparsable":
        raw, error = clean_text(decision["raw"] or ""), clean_text(decision["error"] or "")
        return unparsable(truncate(raw, RAW_KEPT_CHARS), truncate(error, RAW_KEPT_CHARS)), None
    decision = clean_value(decision)
    return decision, None if stored is None else _storable_message(stored, decision["calls"])


def _quoted(call: dict[str, Any]) -> str:
    """A refused call as the model wrote it, for the retry hint (cut by the caller)."""
    try:
        args = json.dumps(call.get("args"), ensure_ascii=False, default=repr)
    except (RecursionError, ValueError):  # nested too deeply to write, or circular (a custom protocol)
        args = "…"
    return f"{call['name']}({args})"


def _storable_message(message: AIMessage, calls: list[dict[str, Any]]) -> AIMessage:
    """`message` with its text and calls cleaned; provider metadata that cannot be stored is dropped."""
    content: Any = message.content
    if isinstance(content, str):
        content = clean_text(content)
    else:
        content = clean_value(content) if storage_problem(content) is None else clean_text(message.text)
    update: dict[str, Any] = {"content": content, "tool_calls": calls}
    for field in ("additional_kwargs", "response_metadata"):
        value = getattr(message, field)
        update[field] = clean_value(value) if storage_problem(value) is None else {}
    if message.usage_metadata is not None and storage_problem(dict(message.usage_metadata)):
        update["usage_metadata"] = None
    if message.id is not None:
        update["id"] = clean_text(message.id)
    if message.name is not None:
        update["name"] = clean_text(message.name)
    if all(getattr(message, field) == value for field, value in update.items()):
        return message  # nothing to clean (most replies): the same object, which the token counter knows
    return message.model_copy(update=update)
