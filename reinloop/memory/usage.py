"""Token usage of model calls: as the provider reports it, else as reinloop counts it.

Every reply costs what it holds: a reply whose completion tokens the provider does not report (or reports as
none, as some OpenAI-compatible servers do) is counted with tiktoken, its malformed tool calls included, so
that a runaway reply counts towards `run_token_budget` whatever the server says.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from reinloop.memory.tokens import TokenCounter
from reinloop.state import CallUsage, TokenUsage

__all__ = ["add_usage", "call_usage"]


def call_usage(node: str, reply: BaseMessage, counted_prompt: int, counter: TokenCounter) -> CallUsage:
    """The provider's token report for `reply` when it has one (`source` "provider": its prompt tokens, and its
    completion tokens unless it reports none for a reply that holds something), else reinloop's own count."""
    reported: Any = getattr(reply, "usage_metadata", None) or {}
    if reported.get("input_tokens") is not None:
        completion = int(reported.get("output_tokens") or 0)
        return CallUsage(
            node=node,
            prompt_tokens=int(reported["input_tokens"]),
            completion_tokens=completion if completion > 0 or _is_empty(reply) else _reply_tokens(reply, counter),
            counted_prompt_tokens=counted_prompt,
            source="provider",
        )
    return CallUsage(
        node=node,
        prompt_tokens=counted_prompt,
        completion_tokens=_reply_tokens(reply, counter),
        counted_prompt_tokens=counted_prompt,
        source="tiktoken",
    )


def _reply_tokens(reply: BaseMessage, counter: TokenCounter) -> int:
    """What `reply` holds, counted: its text and tool calls, and the calls whose arguments did not parse (a
    reply cut in the middle of a call holds nothing else)."""
    tokens = counter.message(reply)
    for call in getattr(reply, "invalid_tool_calls", None) or []:
        tokens += counter.text(str(call.get("name") or "")) + counter.text(str(call.get("args") or ""))
    return tokens


def _is_empty(reply: BaseMessage) -> bool:
    calls = isinstance(reply, AIMessage) and (reply.tool_calls or reply.invalid_tool_calls)
    return not reply.text and not calls


def add_usage(usage: TokenUsage, call: CallUsage) -> TokenUsage:
    """`usage` with one more call added."""
    return TokenUsage(
        model_calls=usage["model_calls"] + 1,
        prompt_tokens=usage["prompt_tokens"] + call["prompt_tokens"],
        completion_tokens=usage["completion_tokens"] + call["completion_tokens"],
        total_tokens=usage["total_tokens"] + call["prompt_tokens"] + call["completion_tokens"],
    )
