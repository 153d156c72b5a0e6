"""Token usage of model calls: as the provider reports it, else as reinloop counts it.

Every reply costs what it holds: a reply whose completion tokens the provider does not report (or reports as
none, as some OpenAI-compatible servers do) is counted with tiktoken, its malformed tool calls included, so
that a runaway reply counts towards `run_token_budget` whatever the server says. The prompt tokens a provider
reports it read from or wrote to its prompt cache (`input_token_details`) are kept beside them: they are part of
the prompt tokens, not added to them.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from reinloop.memory.tokens import TokenCounter
from reinloop.state import CallUsage, TokenUsage

__all__ = ["add_usage", "cache_tokens", "call_usage"]


def call_usage(node: str, reply: BaseMessage, counted_prompt: int, counter: TokenCounter) -> CallUsage:
    """The provider's token report for `reply` when it has one (`source` "provider": its prompt tokens, and its
    completion tokens unless it reports none for a reply that holds something), else reinloop's own count."""
    reported: Any = getattr(reply, "usage_metadata", None) or {}
    if reported.get("input_tokens") is not None:
        completion = int(reported.get("output_tokens") or 0)
        read, written = cache_tokens(reply)
        return CallUsage(
            node=node,
            prompt_tokens=int(reported["input_tokens"]),
            completion_tokens=completion if completion > 0 or _is_empty(reply) else _reply_tokens(reply, counter),
            counted_prompt_tokens=counted_prompt,
            source="provider",
            cache_read_tokens=read,
            cache_write_tokens=written,
        )
    return CallUsage(
        node=node,
        prompt_tokens=counted_prompt,
        completion_tokens=_reply_tokens(reply, counter),
        counted_prompt_tokens=counted_prompt,
        source="tiktoken",
        cache_read_tokens=0,
        cache_write_tokens=0,
    )


# Where LangChain integrations report cache writes per lifetime (langchain-anthropic: its `cache_creation` is then 0).
CACHE_WRITE_DETAILS = ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")


def cache_tokens(reply: BaseMessage) -> tuple[int, int]:
    """The prompt tokens the provider reports `reply`'s call read from and wrote to its prompt cache, from
    `usage_metadata`'s `input_token_details`: `cache_read` and `cache_creation`, also under a service tier's
    prefix (langchain-openai's `priority_cache_read`); never more than its prompt tokens (0, 0: none reported)."""
    reported: Any = getattr(reply, "usage_metadata", None) or {}
    details, prompt = reported.get("input_token_details"), reported.get("input_tokens")
    if not isinstance(details, dict) or not isinstance(prompt, int) or prompt <= 0:
        return 0, 0
    read = written = 0
    for key, value in details.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            continue
        if key == "cache_read" or key.endswith("_cache_read"):
            read += value
        elif key == "cache_creation" or key.endswith("_cache_creation"):
            written += value
    by_lifetime = sum(v for k, v in details.items() if k in CACHE_WRITE_DETAILS and isinstance(v, int) and v > 0)
    read = min(read, prompt)
    return read, min(max(written, by_lifetime), prompt - read)


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
        cache_read_tokens=usage.get("cache_read_tokens", 0) + call.get("cache_read_tokens", 0),
        cache_write_tokens=usage.get("cache_write_tokens", 0) + call.get("cache_write_tokens", 0),
    )
