"""What a checkpointer can store: text and JSON-like values cleaned or refused before they reach state.

Everything in `AgentState` is saved by LangGraph's serializer (msgpack) and, with PostgreSQL, partly as JSONB.
Both refuse values that `json.loads` happily returns for a provider's or a model's output: integers beyond
64 bits, nesting deeper than msgpack's recursion limit, and (JSONB) text holding NUL characters or lone UTF-16
surrogates (`"\\ud83d"`). A value that cannot be saved must never enter state: the step that wrote it would
fail after the run had gone on, and calls made meanwhile would run again on resume.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "INT_RANGE",
    "MAX_ARGS_CHARS",
    "MAX_DEPTH",
    "args_problem",
    "clean_text",
    "clean_value",
    "storage_problem",
]

# msgpack stores signed and unsigned 64-bit integers, nothing wider.
INT_RANGE = (-(2**63), 2**64 - 1)
# Nesting this deep is never a sensible tool argument; msgpack's own limit is about 250 levels, and the
# message that holds the arguments adds a few.
MAX_DEPTH = 64
# Tool-call arguments larger than this (as text) are refused before they are saved.
MAX_ARGS_CHARS = 1_000_000

# Surrogate code points (in a Python str even a "pair" of them is two code points that UTF-8 cannot encode;
# json.loads joins real pairs into one character) and NUL, which PostgreSQL text refuses.
_UNSTORABLE_CHARS = re.compile("[\ud800-\udfff\x00]")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """`text` with every surrogate code point and NUL character replaced by U+FFFD; other text is returned as is."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE_CHARS.sub(REPLACEMENT, text)


def clean_value(value: Any) -> Any:
    """`value` with `clean_text` applied to every string in it, keys included (a new object when changed)."""
    kind = type(value)  # the exact JSON types first: an ABC's isinstance costs more than the rest of a step
    if kind is str:
        return clean_text(value)
    if kind in _LEAVES:
        return value
    if kind is dict or (kind is not list and kind is not tuple and isinstance(value, Mapping)):
        return {clean_value(key): clean_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(item) for item in value]
    if isinstance(value, str):
        return clean_text(value)
    return value


def storage_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why `value` (a JSON-like value) cannot be saved, or None when it can. Never recurses without bound."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"nesting deeper than {max_depth} levels"
        kind = type(item)
        if kind in _TEXT_AND_FLAGS:  # the exact types first: an ABC's isinstance costs more than the rest
            continue
        if kind is dict or (kind is not list and kind is not tuple and isinstance(item, Mapping)):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"a key of type {type(key).__name__} (keys must be strings)"
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
        elif problem := _scalar_problem(item):
            return problem
    return None


def _scalar_problem(item: Any) -> str | None:
    """Why a value that holds no other cannot be saved, or None."""
    if item is None or isinstance(item, bool | float | str):
        return None
    if isinstance(item, int):
        if INT_RANGE[0] <= item <= INT_RANGE[1]:
            return None
        return f"an integer of {item.bit_length()} bits (at most 64 bits can be stored)"
    return f"a value of type {type(item).__name__}"


# Values `clean_value` returns as they are, and values `storage_problem` accepts as they are, by exact type.
_LEAVES = frozenset({int, float, bool, type(None)})
_TEXT_AND_FLAGS = frozenset({str, float, bool, type(None)})


def args_problem(args: Any, max_chars: int = MAX_ARGS_CHARS) -> str | None:
    """Why a checkpointer cannot store these tool-call arguments (or any JSON-like value), or why they are too
    large: more than `max_chars` characters of JSON; else None."""
    if problem := storage_problem(args):
        return problem
    # Safe now: storage_problem bounded the nesting and the types.
    chars = len(json.dumps(args, ensure_ascii=False))
    return f"{chars} characters of JSON" if chars > max_chars else None
