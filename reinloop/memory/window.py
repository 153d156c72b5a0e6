"""The short-term window: recent messages grouped into entries that are kept or dropped whole."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from reinloop.text import gist, truncate

__all__ = [
    "CACHED_RESULT_PREFIX",
    "CACHED_RESULT_TEMPLATE",
    "EntryFacts",
    "digest",
    "entry_facts",
    "entry_key",
    "error_note",
    "failed",
    "is_error_note",
    "pairing_violations",
    "window_entries",
]

# How a call answered from the cache (the repeats guard) is shown: the result it repeats, after this line. The
# window sees it as that result, so the older entry it repeats leaves.
CACHED_RESULT_PREFIX = "Not run again; you already have its result:\n"
CACHED_RESULT_TEMPLATE = CACHED_RESULT_PREFIX + "{result}"

# Marks an error note (in additional_kwargs, which chat model integrations do not send for a user message).
ERROR_NOTE_KEY = "reinloop_error_note"

# What a digest keeps of an error result: its first sentence, at most this long.
FAILURE_GIST_CHARS = 100


def window_entries(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """Split the window into entries: a message that is not a tool result, followed by the tool results
    that answer it. Dropping whole entries never separates a tool call from its result."""
    entries: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, ToolMessage) and entries:
            entries[-1].append(message)
        else:
            entries.append([message])
    return entries


def pairing_violations(messages: Sequence[BaseMessage]) -> list[str]:
    """Every way `messages` breaks the rule that each tool call is answered by exactly one result that
    follows it directly; empty when the window is well formed."""
    return [problem for entry in window_entries(messages) for problem in entry_facts(entry).problems]


def _problems(entry: Sequence[BaseMessage]) -> tuple[str, ...]:
    """How one entry breaks the pairing rule (see `pairing_violations`)."""
    head, results = entry[0], entry[1:]
    if isinstance(head, ToolMessage):
        return (f"tool result {head.tool_call_id!r} answers no call",)
    problems: list[str] = []
    calls = [call["id"] for call in head.tool_calls] if isinstance(head, AIMessage) else []
    answered: list[str | None] = [result.tool_call_id for result in results if isinstance(result, ToolMessage)]
    for call_id in calls:
        count = answered.count(call_id)
        if count != 1:
            problems.append(f"tool call {call_id!r} has {count} results")
    problems.extend(f"tool result {rid!r} answers no call" for rid in answered if rid not in calls)
    return tuple(problems)


def error_note(text: str) -> HumanMessage:
    """A note in the window that reports an error of the model's own (an unreadable reply): marked, so that
    once the model makes another attempt, it leaves the window like a failed call (the mark is never sent)."""
    return HumanMessage(text, additional_kwargs={ERROR_NOTE_KEY: True})


def is_error_note(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and bool(message.additional_kwargs.get(ERROR_NOTE_KEY))


def failed(entry: Sequence[BaseMessage]) -> bool:
    """Whether the entry is a decision whose every tool call failed (an error result for each), or an error note."""
    head, results = entry[0], entry[1:]
    calls = head.tool_calls if isinstance(head, AIMessage) else []
    if not calls:
        return is_error_note(head)
    return all(isinstance(result, ToolMessage) and result.status == "error" for result in results)


class EntryFacts(NamedTuple):
    """What compress_memory and decide ask of a window entry every round, computed once per entry."""

    key: str  # `entry_key`
    failed: bool  # `failed`
    problems: tuple[str, ...]  # its part of `pairing_violations`


# Facts already computed, by the identity of the entry's messages: a window's messages are the same objects from
# round to round within a run, and each round asks for every entry. The cache holds the messages themselves, so
# their ids cannot be reused while they are in it: equal ids are the same messages.
FACTS_CACHE_SIZE = 4_096
_facts: dict[tuple[int, ...], tuple[tuple[BaseMessage, ...], EntryFacts]] = {}


def entry_facts(entry: Sequence[BaseMessage]) -> EntryFacts:
    """The entry's key, whether it failed and how it breaks the pairing rule, remembered by identity."""
    ids = tuple(map(id, entry))
    cached = _facts.get(ids)
    if cached is not None:
        return cached[1]
    facts = EntryFacts(_entry_key(entry), failed(entry), _problems(entry))
    if len(_facts) >= FACTS_CACHE_SIZE:
        _facts.clear()
    _facts[ids] = (tuple(entry), facts)
    return facts


def entry_key(entry: Sequence[BaseMessage]) -> str:
    """What makes two window entries the same memory: the same calls (tool name and canonical arguments)
    with the same results, or, for a note without tool calls, the same text. A result answered from cache
    is the result it repeats, so the call it repeats leaves the window and the answer from cache stays.
    Equal results of different calls (`add(2, 2)` and `add(1, 3)` both return 4) are different memories."""
    return entry_facts(entry).key


def _entry_key(entry: Sequence[BaseMessage]) -> str:
    head = entry[0]
    calls = head.tool_calls if isinstance(head, AIMessage) else []
    results = [message.text.removeprefix(CACHED_RESULT_PREFIX) for message in entry[1:]]
    # default=str: a hand-built message may hold arguments that are not JSON.
    identity = [[[call["name"], call["args"]] for call in calls], results] if calls or results else head.text
    text = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    # surrogatepass: a lone surrogate (from odd tool output) must not make the hash raise.
    return hashlib.sha1(text.encode(errors="surrogatepass")).hexdigest()


def digest(entry: Sequence[BaseMessage], max_chars: int = 300) -> str:
    """One line that keeps the gist of a window entry: the calls made and what they returned (of an error, its
    first sentence)."""
    head, results = entry[0], entry[1:]
    if isinstance(head, AIMessage) and head.tool_calls:
        by_id: dict[str | None, ToolMessage] = {
            result.tool_call_id: result for result in results if isinstance(result, ToolMessage)
        }
        parts = []
        for call in head.tool_calls:
            result = by_id.get(call["id"])
            args = json.dumps(call["args"], ensure_ascii=False)
            if result is None:
                outcome = "no result"
            elif result.status == "error":  # what failed, without the advice the model already acted on
                outcome = gist(result.text, FAILURE_GIST_CHARS)
            else:
                outcome = " ".join(result.text.split())
            parts.append(f"{call['name']}({args}) -> {outcome}")
        line = "; ".join(parts)
    else:
        line = f"{head.type}: {' '.join(head.text.split())}"
    return truncate(line, max_chars)
