"""compress_memory: keep the short-term window bounded and fold what leaves it into summaries.

Reads `messages`, `pending`, `summaries`, `folds`, `usage`. Writes `messages` (removals only), `pending`,
and on a fold `summaries`, `folds`, `usage`, `last_call`, plus the summary and each folded step's digest
in the long-term store.
Window entries (a decision with its results, or a note) are kept or dropped whole, so a tool call never
loses its result:
1. LRU: an entry that repeats a newer one (the same calls with the same results, or the same note) is
   dropped, and the newer one stays; the dropped repeat leaves no digest, since the newer copy says the
   same (the repeat guards tell the model about repeats, and the newer copy leaves its own digest).
2. Failures the model moved past: a decision whose every call failed, or an error note (an unreadable
   reply), leaves the window with no digest once a newer entry follows it (a success, or another
   attempt): the model has answered it, its error text would be sent again with every later prompt, the
   repeat guards keep their own record of failed calls (`call_window`), and a reflection turn lists the
   errors of a streak itself (`streak_errors`). Only the newest entry, if it failed, stays for the model
   to react to.
3. Entries beyond `memory_capacity`, oldest first, leave the window as one-line digests (`pending`), and so
   do more while the next prompt would exceed `context_token_budget`.
4. Every `compress_every` digests, or at once when over budget, the digests are folded into a summary by
   the summarizer model; a failing summarizer falls back to the digests themselves.
"""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from reinloop.context import AgentContext
from reinloop.drivers import Steps, adrive, drive
from reinloop.memory.long_term import memory_namespace, remember_steps
from reinloop.memory.summary import summarize_steps
from reinloop.memory.usage import add_usage, call_usage
from reinloop.memory.window import digest, entry_facts, window_entries
from reinloop.prompt import assemble, prompt_tokens
from reinloop.state import NO_USAGE, AgentState

__all__ = ["SUMMARIES_KEPT", "acompress_memory", "compress_memory"]

# Summaries shown in the prompt; older ones stay in the long-term store, where recall finds them.
SUMMARIES_KEPT = 2
# Characters per token assumed for memories that recall may add to the next prompt (conservative).
CHARS_PER_TOKEN = 3


def compress_memory(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: Optional[BaseStore] = None,  # noqa: UP045 - LangGraph injects the store by this exact annotation
) -> dict[str, Any]:
    return drive(_compress_memory(state, ctx, config, store))


async def acompress_memory(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: Optional[BaseStore] = None,  # noqa: UP045 - LangGraph injects the store by this exact annotation
) -> dict[str, Any]:
    """`compress_memory` under ainvoke/astream: awaits the summarizer's `ainvoke` and the store's `aput`."""
    return await adrive(_compress_memory(state, ctx, config, store))


def _compress_memory(
    state: AgentState, ctx: AgentContext, config: RunnableConfig, store: BaseStore | None
) -> Steps[dict[str, Any]]:
    settings = ctx.settings
    entries = window_entries(state.get("messages", []))
    kept, dropped = _latest_of_each(entries)
    kept, resolved = _without_resolved_failures(kept)
    # In window order. No error note is among them: one that is not the newest entry has left as a failure the
    # model moved past, and the newest entry always stays.
    evicted = kept[: max(0, len(kept) - settings.memory_capacity)]
    kept = kept[len(evicted) :]
    dropped = [*dropped, *resolved]
    pending = [*(state.get("pending") or []), *(digest(entry) for entry in evicted)]
    summaries = list(state.get("summaries") or [])
    tokens = _next_prompt_tokens(state, ctx, kept, summaries, pending)
    while tokens > settings.context_token_budget and len(kept) > 1:
        evicted.append(kept.pop(0))
        pending.append(digest(evicted[-1]))
        tokens = _next_prompt_tokens(state, ctx, kept, summaries, pending)
    over_budget = tokens > settings.context_token_budget

    update: dict[str, Any] = {}
    if len(pending) >= settings.compress_every or (pending and over_budget):
        folded = yield from summarize_steps(ctx.summarizer, state["task"], pending, settings.summary_max_chars)
        folds = state.get("folds", 0) + 1
        summaries = [*summaries, folded.text][-SUMMARIES_KEPT:]
        if store is not None:
            # The summary, and each step's digest on its own: recall can then find one precise fact
            # that a summary of several steps left out or diluted.
            namespace, iteration = memory_namespace(config), state.get("iteration", 0)
            yield from remember_steps(
                store, namespace, f"{folds:06d}-summary", folded.text, iteration=iteration, kind="summary"
            )
            for number, line in enumerate(pending):
                yield from remember_steps(
                    store, namespace, f"{folds:06d}-step-{number}", line, iteration=iteration, kind="step"
                )
        update.update(summaries=summaries, folds=folds)
        if folded.reply is not None:
            last_call = call_usage("compress_memory", folded.reply, ctx.counter.messages(folded.prompt), ctx.counter)
            update.update(last_call=last_call, usage=add_usage(state.get("usage", NO_USAGE), last_call))
        pending = []
    if pending != (state.get("pending") or []):
        update["pending"] = pending
    removed = [message for entry in (*dropped, *evicted) for message in entry]
    if removed:
        update["messages"] = [RemoveMessage(id=message.id) for message in removed if message.id is not None]
    return update


def _latest_of_each(entries: list[list[BaseMessage]]) -> tuple[list[list[BaseMessage]], list[list[BaseMessage]]]:
    """Entries in order with repeats removed (the newest copy kept), and the removed repeats."""
    seen: set[str] = set()
    kept: list[list[BaseMessage]] = []
    dropped: list[list[BaseMessage]] = []
    for entry in reversed(entries):
        key = entry_facts(entry).key
        (dropped if key in seen else kept).append(entry)
        seen.add(key)
    kept.reverse()
    return kept, dropped


def _without_resolved_failures(
    entries: list[list[BaseMessage]],
) -> tuple[list[list[BaseMessage]], list[list[BaseMessage]]]:
    """Entries without the failures (all-failed decisions, error notes) that a newer entry followed, and those."""
    kept: list[list[BaseMessage]] = []
    resolved: list[list[BaseMessage]] = []
    for entry in entries[:-1]:
        (resolved if entry_facts(entry).failed else kept).append(entry)
    return kept + entries[-1:], resolved


def _next_prompt_tokens(
    state: AgentState,
    ctx: AgentContext,
    kept: list[list[BaseMessage]],
    summaries: list[str],
    pending: list[str],
) -> int:
    """What the next decision's prompt will cost, with room for the memories recall may add."""
    window = [message for entry in kept for message in entry]
    prompt = assemble(ctx, state["task"], window, summaries=summaries, pending=pending)
    recall_room = ctx.settings.recall_k * ctx.settings.summary_max_chars // CHARS_PER_TOKEN
    return prompt_tokens(ctx, prompt) + recall_room
