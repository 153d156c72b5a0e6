"""compress_memory: keep the short-term window bounded, in batches, and fold what leaves it into a summary.

Reads `messages`, `pending`, `summaries`, `folds`, `usage`. Writes `messages` (removals only), and at a
compaction `recalled` (cleared: decide recalls anew for the new note) and on a fold `summaries`, `folds`,
`pending` (emptied), `usage`, `last_call`, plus the summary and each folded step's digest in the long-term
store. Entries (a decision with its results, or a note) leave whole, so a tool call never loses its result: a
repeat of a newer entry or a failure the model moved past at once, with no digest; the oldest, at a
compaction, as digests folded into one summary (`_compress_memory` has the rules). Between compactions the
window only grows, so a provider's prompt cache reuses each prompt.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from reinloop.context import AgentContext
from reinloop.drivers import Steps, adrive, drive
from reinloop.memory.long_term import memory_namespace, remember_steps
from reinloop.memory.summary import FOLD_REQUEST, summarize_steps, summary_words
from reinloop.memory.usage import add_usage, call_usage
from reinloop.memory.window import digest, entry_facts, window_entries
from reinloop.models.caching import bound_settings, cache_key, for_provider
from reinloop.prompt import assemble, memory_note, prompt_tokens
from reinloop.protocols.interface import read_reply
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
    """The window's entries (a decision with its results, or a note), kept or dropped whole:

    1. LRU: an entry that repeats a newer one (the same calls with the same results, or the same note) is
       dropped, and the newer one stays; the dropped repeat leaves no digest, since the newer copy says the same.
    2. Failures the model moved past: a decision whose every call failed, or an error note, leaves with no
       digest once a newer entry follows it (the repeat guards keep their own record of failed calls, and a
       reflection turn lists the errors of a streak itself). Only the newest entry, if it failed, stays. Its
       prompt was cached up to it, so leaving costs the cache one entry.
    3. A compaction, once more than `memory_capacity` entries remain or the next prompt would exceed
       `context_token_budget`: the oldest entries leave as one-line digests until `memory_capacity + 1 -
       compress_every` remain (at least one, the newest), so a full window folds `compress_every` entries at
       once; more leave while the next prompt would exceed the budget.
    4. The digests are folded into one summary by the summarizer model at once; a failing summarizer falls
       back to the digests themselves.

    Between compactions the window only grows but for rules 1 and 2, so each prompt is the previous one plus
    the new messages (up to the entry a rule removed), and a provider's prompt cache reuses it.
    """
    ctx = ctx.shown(state.get("tools"))  # as the decisions see it: their prompts are what a fold continues
    settings = ctx.settings
    kept, dropped = _latest_of_each(window_entries(state.get("messages", [])))
    kept, resolved = _without_resolved_failures(kept)
    summaries = list(state.get("summaries") or [])
    pending = list(state.get("pending") or [])
    update: dict[str, Any] = {}
    evicted: list[list[BaseMessage]] = []
    if len(kept) > settings.memory_capacity or _over_budget(state, ctx, kept, summaries, pending):
        # A compaction. In window order; no error note is among them: one that is not the newest entry has left
        # as a failure the model moved past, and the newest entry always stays.
        evicted = kept[: max(0, len(kept) - max(1, settings.memory_capacity + 1 - settings.compress_every))]
        kept = kept[len(evicted) :]
        pending += [digest(entry) for entry in evicted]
        while len(kept) > 1 and _over_budget(state, ctx, kept, summaries, pending):
            evicted.append(kept.pop(0))
            pending.append(digest(evicted[-1]))
        update["recalled"] = None
        if pending:
            asked = _fold_prompt(state, ctx, evicted, summaries) if ctx.summarizer is ctx.chat_model else None
            update.update((yield from _fold(state, ctx, config, store, summaries, pending, asked)))
    removed = [message for entry in (*dropped, *resolved, *evicted) for message in entry]
    if removed:
        update["messages"] = [RemoveMessage(id=message.id) for message in removed if message.id is not None]
    return update


def _fold(
    state: AgentState,
    ctx: AgentContext,
    config: RunnableConfig,
    store: BaseStore | None,
    summaries: list[str],
    pending: list[str],
    asked: tuple[list[BaseMessage], int] | None = None,
) -> Steps[dict[str, Any]]:
    """Fold the digests `pending` into a summary: the update that keeps it (and its call's usage), after
    saving the summary and each digest in the long-term store. `asked`: the fold request in the decisions'
    context and its tokens (`_fold_prompt`), sent to the agent's model as a decision is; None: the summarizer's
    own prompt."""
    settings = ctx.settings
    if asked is None:
        folded = yield from summarize_steps(ctx.summarizer, state["task"], pending, settings.summary_max_chars)
        tokens = ctx.counter.messages(folded.prompt)
    else:
        prompt, tokens = asked
        sent, kwargs = for_provider(ctx.chat_model, prompt, cache_key(config), bound_settings(ctx.model))
        read = partial(_summary_in_reply, ctx)
        folded = yield from summarize_steps(
            ctx.model, state["task"], pending, settings.summary_max_chars, prompt=sent, read=read, **kwargs
        )
    folds = state.get("folds", 0) + 1
    if store is not None:
        # The summary, and each step's digest on its own: recall can then find one precise fact that a summary
        # of several steps left out or diluted.
        namespace, iteration = memory_namespace(config), state.get("iteration", 0)
        yield from remember_steps(
            store, namespace, f"{folds:06d}-summary", folded.text, iteration=iteration, kind="summary"
        )
        for number, line in enumerate(pending):
            yield from remember_steps(
                store, namespace, f"{folds:06d}-step-{number}", line, iteration=iteration, kind="step"
            )
    update: dict[str, Any] = {"summaries": [*summaries, folded.text][-SUMMARIES_KEPT:], "folds": folds, "pending": []}
    if folded.reply is not None:
        last_call = call_usage("compress_memory", folded.reply, tokens, ctx.counter)
        update.update(last_call=last_call, usage=add_usage(state.get("usage", NO_USAGE), last_call))
    return update


def _fold_prompt(
    state: AgentState, ctx: AgentContext, evicted: list[list[BaseMessage]], summaries: list[str]
) -> tuple[list[BaseMessage], int] | None:
    """The fold request in the decisions' context: the last decision's prompt up to the entries that leave (its
    tools, task, memory note and the start of its history: read from the provider's cache, or llama.cpp's KV
    cache, where that prompt was), then the request to summarize those entries, in full, as a final answer; and
    its tokens. None when it would not fit the context budget."""
    window = [message for entry in evicted for message in entry]
    pending, memories = state.get("pending") or [], state.get("recalled") or []
    request = FOLD_REQUEST.format(
        after="memory note" if memory_note(summaries, pending, memories) else "task",
        words=summary_words(ctx.settings.summary_max_chars),
    )
    prompt = assemble(
        ctx, state["task"], window, summaries=summaries, pending=pending, memories=memories, correction=request
    )
    tokens = prompt_tokens(ctx, prompt)
    return (prompt, tokens) if tokens <= ctx.budget.tokens else None


def _summary_in_reply(ctx: AgentContext, reply: BaseMessage) -> str | None:
    """The summary a fold request's reply gives as its final answer, as the protocol reads one; None for
    anything else (a tool call, an unreadable reply)."""
    decision, _ = read_reply(ctx.protocol, reply, ctx.registry)
    return decision["answer"] if decision["kind"] == "answer" else None


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


def _over_budget(
    state: AgentState,
    ctx: AgentContext,
    kept: list[list[BaseMessage]],
    summaries: list[str],
    pending: list[str],
) -> bool:
    """Whether the next decision's prompt would exceed the budget, with room for the memories recall may add."""
    window = [message for entry in kept for message in entry]
    prompt = assemble(ctx, state["task"], window, summaries=summaries, pending=pending)
    recall_room = ctx.settings.recall_k * ctx.settings.summary_max_chars // CHARS_PER_TOKEN
    return prompt_tokens(ctx, prompt) + recall_room > ctx.budget.tokens
