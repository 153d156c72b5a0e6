"""Folding window entries into a summary: by a chat model, with an extractive fallback.

A summarizer that fails (an exception, an empty reply) never ends the run: the digests of the folded
entries, cut to length, are the summary instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langgraph.errors import GraphBubbleUp

from reinloop.drivers import Steps, adrive, drive, invoke
from reinloop.storable import clean_text
from reinloop.text import truncate

__all__ = ["SUMMARY_PROMPT", "Folded", "asummarize", "extractive_summary", "summarize", "summarize_steps"]

# The shortest an extractive summary cuts one step's digest.
MIN_LINE_CHARS = 40
SUMMARY_PROMPT = (
    "You keep the memory of an AI agent that works on a task with tools. Summarize the agent's steps below "
    "in at most {words} words. Keep every fact it learned (numbers, names, dates, file paths, ids), what it "
    "changed, and what failed and why. Leave out chatter. Reply with the summary only."
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


def summarize_steps(model: Runnable[Any, Any] | None, task: str, lines: Sequence[str], max_chars: int) -> Steps[Folded]:
    """`summarize` as steps for `reinloop.drivers`: the model's `invoke` under `drive`, `ainvoke` under `adrive`."""
    prompt: list[BaseMessage] = [
        SystemMessage(SUMMARY_PROMPT.format(words=max(20, max_chars // 7))),
        HumanMessage(f"The task: {task}\n\nThe steps:\n" + "\n".join(f"- {line}" for line in lines)),
    ]
    if model is None:
        return Folded(extractive_summary(lines, max_chars), False, prompt, None)
    try:
        reply = yield from invoke(model, prompt)
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
