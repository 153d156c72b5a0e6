"""Exactly what the model is sent for a decision, and keeping it within the context token budget."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from reinloop.context import AgentContext
from reinloop.memory.window import truncate

__all__ = ["MEMORY_HEADER", "assemble", "fit_to_budget", "memory_note", "prompt_tokens"]

MEMORY_HEADER = "Memory of your earlier steps on this task (the messages below show only the latest ones)."
# Below this many characters a message is not cut any further.
MIN_CUT_CHARS = 40


def memory_note(summaries: Sequence[str], pending: Sequence[str], memories: Sequence[str]) -> str | None:
    """The memory block shown after the task: summaries, not-yet-folded steps, recalled memories."""
    parts = []
    if summaries:
        parts.append("Summary:\n" + "\n".join(summaries))
    if pending:
        parts.append("Steps since the summary:\n" + "\n".join(f"- {line}" for line in pending))
    if memories:
        parts.append("Recalled from long-term memory:\n" + "\n".join(f"- {text}" for text in memories))
    return f"{MEMORY_HEADER}\n\n" + "\n\n".join(parts) if parts else None


def assemble(
    ctx: AgentContext,
    task: str,
    window: Sequence[BaseMessage],
    *,
    summaries: Sequence[str] = (),
    pending: Sequence[str] = (),
    memories: Sequence[str] = (),
    correction: str | None = None,
) -> list[BaseMessage]:
    """System prompt, task, memory block, the rendered window, and a pending correction hint."""
    prompt: list[BaseMessage] = [SystemMessage(ctx.system_prompt), HumanMessage(task)]
    if note := memory_note(summaries, pending, memories):
        prompt.append(HumanMessage(note))
    prompt.extend(ctx.protocol.render(window))
    if correction:
        prompt.append(HumanMessage(correction))
    return ctx.protocol.finalize(prompt)


def prompt_tokens(ctx: AgentContext, prompt: Sequence[BaseMessage]) -> int:
    """Tokens of the messages plus the tool schemas sent beside them."""
    return ctx.counter.messages(prompt) + ctx.tool_tokens


def fit_to_budget(ctx: AgentContext, prompt: list[BaseMessage]) -> tuple[list[BaseMessage], int]:
    """`prompt` cut until it fits `context_token_budget`, and its tokens: the largest message is cut first,
    never the system prompt, never a tool call or its id. Raises when even that cannot make it fit."""
    budget = ctx.config.context_token_budget
    prompt = list(prompt)
    while (tokens := prompt_tokens(ctx, prompt)) > budget:
        sizes = [
            (ctx.counter.message(message), index)
            for index, message in enumerate(prompt)
            if index > 0 and isinstance(message.content, str) and len(message.content) > MIN_CUT_CHARS
        ]
        if not sizes:
            raise RuntimeError(
                f"the prompt needs {tokens} tokens even with every message cut, over context_token_budget="
                f"{budget}; raise the budget or shorten the system prompt and tool descriptions"
            )
        _, index = max(sizes)
        message = prompt[index]
        excess = tokens - budget
        # Cut the largest message by what is over (in characters, about 4 per token), at least by half.
        keep = max(MIN_CUT_CHARS, min(len(message.content) // 2, len(message.content) - 4 * excess))
        prompt[index] = message.model_copy(update={"content": truncate(message.content, keep)})
    return prompt, tokens
