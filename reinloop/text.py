"""Cutting text to length: the one helper and the one marker of cut text, for everything reinloop shows a
model or a person (prompts, observations, digests, summaries, feedback, final messages); and counts with their
noun ("1 round", "2 rounds")."""

from __future__ import annotations

import re

__all__ = ["CUT_MARKER", "counted", "gist", "truncate"]

# The first sentence: up to a full stop, question or exclamation mark that ends the text or comes before a space.
_FIRST_SENTENCE = re.compile(r"\S.*?[.!?](?=\s|$)", re.DOTALL)

# What replaces the end of a text cut by `truncate`; the one marker of cut text everywhere.
CUT_MARKER = " … [{count} more characters cut]"


def truncate(text: str, max_chars: int) -> str:
    """`text` cut to its first `max_chars` characters, with a visible marker saying how much was cut.

    Never longer than `text`: when the marker would not make it shorter, `text` is returned whole.
    """
    max_chars = max(0, max_chars)
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars] + CUT_MARKER.format(count=len(text) - max_chars)
    return cut if len(cut) < len(text) else text


def gist(text: str, max_chars: int | None = None) -> str:
    """The first sentence of `text` on one line (the whole text if it has no sentence end), cut to `max_chars`
    (None: not cut, for a caller that cuts the line it goes into): what an error says, without the advice
    that follows it."""
    line = " ".join(text.split())
    found = _FIRST_SENTENCE.match(line)
    sentence = found.group(0) if found else line
    return sentence if max_chars is None else truncate(sentence, max_chars)


def counted(count: int, noun: str) -> str:
    """`count` with `noun`, in the plural unless it is one: "1 round", "2 rounds"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
