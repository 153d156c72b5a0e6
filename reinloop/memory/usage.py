"""Token usage of model calls: as the provider reports it, else as reinloop counts it."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from reinloop.memory.tokens import TokenCounter
from reinloop.state import CallUsage, TokenUsage

__all__ = ["add_usage", "call_usage"]


def call_usage(node: str, reply: BaseMessage, counted_prompt: int, counter: TokenCounter) -> CallUsage:
    """The provider's token report for `reply` when it has one, else reinloop's own count."""
    reported = getattr(reply, "usage_metadata", None)
    if reported and reported.get("input_tokens") is not None:
        return CallUsage(
            node=node,
            prompt_tokens=int(reported["input_tokens"]),
            completion_tokens=int(reported.get("output_tokens") or 0),
            counted_prompt_tokens=counted_prompt,
            source="provider",
        )
    return CallUsage(
        node=node,
        prompt_tokens=counted_prompt,
        completion_tokens=counter.message(reply),
        counted_prompt_tokens=counted_prompt,
        source="tiktoken",
    )


def add_usage(usage: TokenUsage, call: CallUsage) -> TokenUsage:
    """`usage` with one more call added."""
    return TokenUsage(
        model_calls=usage["model_calls"] + 1,
        prompt_tokens=usage["prompt_tokens"] + call["prompt_tokens"],
        completion_tokens=usage["completion_tokens"] + call["completion_tokens"],
        total_tokens=usage["total_tokens"] + call["prompt_tokens"] + call["completion_tokens"],
    )
