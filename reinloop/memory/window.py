"""The short-term window: recent messages grouped into entries that are kept or dropped whole."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from reinloop.guards.repeats import CACHED_RESULT_PREFIX
from reinloop.text import gist, truncate

__all__ = [
    "digest",
    "entry_key",
    "error_note",
    "failed",
    "is_error_note",
    "pairing_violations",
    "window_entries",
]

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
    problems: list[str] = []
    for entry in window_entries(messages):
        head, results = entry[0], entry[1:]
        if isinstance(head, ToolMessage):
            problems.append(f"tool result {head.tool_call_id!r} answers no call")
            continue
        calls = [call["id"] for call in head.tool_calls] if isinstance(head, AIMessage) else []
        answered: list[str | None] = [result.tool_call_id for result in results if isinstance(result, ToolMessage)]
        for call_id in calls:
            count = answered.count(call_id)
            if count != 1:
                problems.append(f"tool call {call_id!r} has {count} results")
        problems.extend(f"tool result {rid!r} answers no call" for rid in answered if rid not in calls)
    return problems


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


# Entry keys already computed, by the identity of the entry's messages (compress_memory asks for every entry of
# the window every round, and a window's messages are the same objects from round to round within a run). The
# cache holds the messages themselves, so their ids cannot be reused while they are in it.
KEY_CACHE_SIZE = 4_096
_keys: dict[tuple[int, ...], tuple[tuple[BaseMessage, ...], str]] = {}


def entry_key(entry: Sequence[BaseMessage]) -> str:
    """What makes two window entries the same memory: the same calls (tool name and canonical arguments)
    with the same results, or, for a note without tool calls, the same text. A result answered from cache
    is the result it repeats, so the call it repeats leaves the window and the answer from cache stays.
    Equal results of different calls (`add(2, 2)` and `add(1, 3)` both return 4) are different memories."""
    ids = tuple(id(message) for message in entry)
    cached = _keys.get(ids)
    if cached is not None and all(a is b for a, b in zip(cached[0], entry, strict=True)):
        return cached[1]
    key = _entry_key(entry)
    if len(_keys) >= KEY_CACHE_SIZE:
        _keys.clear()
    _keys[ids] = (tuple(entry), key)
    return key


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
