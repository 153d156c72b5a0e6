"""Folding window entries into a summary: by a chat model, with an extractive fallback.

A summarizer that fails (an exception, an empty reply) never ends the run: the digests of the folded
entries, cut to length, are the summary instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langgraph.errors import GraphBubbleUp

from reinloop.drivers import Steps, adrive, drive, invoke
from reinloop.storable import clean_text
from reinloop.text import truncate

__all__ = [
    "FOLD_REQUEST",
    "SUMMARY_PROMPT",
    "Folded",
    "asummarize",
    "extractive_summary",
    "is_summary_request",
    "summarize",
    "summarize_steps",
    "summary_words",
]

# The shortest an extractive summary cuts one step's digest.
MIN_LINE_CHARS = 40
SUMMARY_PROMPT = (
    "You keep the memory of an AI agent that works on a task with tools. Summarize the agent's steps below "
    "in at most {words} words. Keep every fact it learned (numbers, names, dates, file paths, ids), what it "
    "changed, and what failed and why. Leave out chatter. Reply with the summary only."
)

# What a fold asks the agent's own model (its default summarizer), after the prompt of its last decision
# (`reinloop.nodes.compress_memory`): that prompt is then read from the provider's cache.
FOLD_REQUEST = (
    "Memory upkeep, not a step of the task: the steps above, from the first after the {after} up to here, are "
    "about to leave your context. Summarize them in at most {words} words, as your final answer, calling no tool. "
    "Keep every fact they found (numbers, names, dates, file paths, ids), what they changed, and what failed and "
    "why. Leave out chatter."
)


class Folded:
    """The result of a fold: the summary text, whether the model wrote it, and the model call made."""

    __slots__ = ("by_model", "prompt", "reply", "text")

    def __init__(self, text: str, by_model: bool, prompt: list[BaseMessage], reply: AIMessage | None) -> None:
        self.text, self.by_model, self.prompt, self.reply = text, by_model, prompt, reply


def extractive_summary(lines: Sequence[str], max_chars: int) -> str:
    """The digests themselves, each cut to an equal share of `max_chars`, so that every step is kept."""
    if not lines:
        return ""
    share = max(MIN_LINE_CHARS, max_chars // len(lines) - 40)  # room for "- " and a cut marker
    return truncate("\n".join(f"- {truncate(line, share)}" for line in lines), max_chars)


def summarize(model: Runnable[Any, Any] | None, task: str, lines: Sequence[str], max_chars: int) -> Folded:
    """A summary of the digests `lines`, at most `max_chars` long."""
    return drive(summarize_steps(model, task, lines, max_chars))


async def asummarize(model: Runnable[Any, Any] | None, task: str, lines: Sequence[str], max_chars: int) -> Folded:
    """`summarize`, awaiting the model's `ainvoke`."""
    return await adrive(summarize_steps(model, task, lines, max_chars))


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """Whether `messages` ask for a summary (a compaction's fold) rather than a decision: the summarizer's own
    prompt, or the fold request after the agent's prompt. For scripted models that serve both."""
    return bool(messages) and (
        messages[0].text.startswith(SUMMARY_PROMPT[:40]) or messages[-1].text.startswith(FOLD_REQUEST[:40])
    )


def summary_words(max_chars: int) -> int:
    """The length in words a summarizer is asked for, to stay within `max_chars`."""
    return max(20, max_chars // 7)


def summarize_steps(
    model: Runnable[Any, Any] | None,
    task: str,
    lines: Sequence[str],
    max_chars: int,
    *,
    prompt: list[BaseMessage] | None = None,
    read: Callable[[BaseMessage], str | None] | None = None,
    **kwargs: Any,
) -> Steps[Folded]:
    """`summarize` as steps for `reinloop.drivers`: the model's `invoke` under `drive`, `ainvoke` under `adrive`.

    `prompt` replaces the standalone one (SUMMARY_PROMPT over the digests `lines`), sent with `kwargs`; `read`
    takes the summary out of the reply (None: not a summary, so the digests are). `lines` stay the fallback."""
    if prompt is None:
        prompt = [
            SystemMessage(SUMMARY_PROMPT.format(words=summary_words(max_chars))),
            HumanMessage(f"The task: {task}\n\nThe steps:\n" + "\n".join(f"- {line}" for line in lines)),
        ]
    if model is None:
        return Folded(extractive_summary(lines, max_chars), False, prompt, None)
    try:
        reply = yield from invoke(model, prompt, **kwargs)
        if read is not None and isinstance(reply, BaseMessage):
            text = (read(reply) or "").strip()
        else:
            text = reply.text.strip() if isinstance(reply, BaseMessage) else str(reply).strip()
        if not text:
            raise ValueError("the summarizer returned nothing")
    except GraphBubbleUp:
        raise
    except Exception:
        # Any failure of the summarizer (network, quota, a bad reply) degrades to the extractive summary.
        return Folded(extractive_summary(lines, max_chars), False, prompt, None)
    # Model text enters state and the store here: cleaned of what a checkpointer or SQLite cannot store.
    text = truncate(clean_text(text), max_chars)
    return Folded(text, True, prompt, reply if isinstance(reply, AIMessage) else None)
