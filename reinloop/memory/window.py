"""The short-term window: recent messages grouped into entries that are kept or dropped whole."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

__all__ = ["pairing_violations", "window_entries"]


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
        answered = [result.tool_call_id for result in results if isinstance(result, ToolMessage)]
        for call_id in calls:
            count = answered.count(call_id)
            if count != 1:
                problems.append(f"tool call {call_id!r} has {count} results")
        problems.extend(f"tool result {rid!r} answers no call" for rid in answered if rid not in calls)
    return problems
