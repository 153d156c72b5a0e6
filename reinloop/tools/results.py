"""Result checks: is a tool's return value a real result, or an empty "pseudo-success"?

A check takes the raw return value and returns None when it is acceptable, else a short reason that is
shown to the model. Checks are chosen per tool in the `ToolRegistry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import ToolMessage

__all__ = ["ResultCheck", "accept_any", "reject_empty", "to_observation"]

ResultCheck = Callable[[Any], str | None]

# Texts that tools (and the seeds' mock tools) return when they found nothing but did not raise.
_MEANINGLESS_TEXT = frozenset({"none", "null", "nil", "undefined", "[]", "{}", '""', "''", "n/a"})


def reject_empty(value: Any) -> str | None:
    """The default check: None, blank text, empty collections and null-like text are not results."""
    if isinstance(value, ToolMessage):
        value = value.content
    if value is None:
        return "the tool returned nothing (None)"
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return "the tool returned empty text"
        if text.lower() in _MEANINGLESS_TEXT:
            return f"the tool returned {text!r}, which carries no information"
        return None
    if isinstance(value, Mapping | list | tuple | set | frozenset) and len(value) == 0:
        return f"the tool returned an empty {type(value).__name__}"
    return None


def accept_any(value: Any) -> str | None:
    """A check that accepts every result, for tools whose empty result is meaningful."""
    return None


def to_observation(value: Any) -> str:
    """The text the model sees for a tool's return value."""
    if isinstance(value, ToolMessage):
        value = value.content
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
