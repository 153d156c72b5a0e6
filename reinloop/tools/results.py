"""What a tool produced, as the model will read it: result checks, result text and error text.

A check takes the raw return value and returns None when it is acceptable, else a short reason that is
shown to the model. Checks are chosen per tool in the `ToolRegistry`. `result_text` and `describe_error`
turn any return value and any exception into text; they are the only places that call a tool's `__str__`,
and neither lets an exception out that the caller does not expect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException
from pydantic import ValidationError

__all__ = [
    "ResultCheck",
    "UnshowableResultError",
    "accept_any",
    "describe_error",
    "reject_empty",
    "result_text",
    "to_observation",
]

ResultCheck = Callable[[Any], str | None]

# Texts that tools (and the seeds' mock tools) return when they found nothing but did not raise.
_MEANINGLESS_TEXT = frozenset({"none", "null", "nil", "undefined", "[]", "{}", '""', "''", "n/a"})


class UnshowableResultError(ValueError):
    """A tool's return value has no text form: its `__str__` raised, or it is an integer too long to print."""


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


def result_text(value: Any) -> str:
    """The text the model sees for a tool's return value: text as is, anything else as compact JSON (no
    spaces after separators: a tenth fewer tokens for a list of records, and as readable), else `str()`.

    Raises `UnshowableResultError` saying why when the value has no text form (`10**5000`, an object whose
    `__str__` raises); no other exception escapes.
    """
    if isinstance(value, ToolMessage):
        value = value.content
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    # json.dumps calls str() through default=, and int() text has a digit limit, so both can raise anything
    # the value's own methods raise; RecursionError on deep nesting is an Exception too.
    try:
        return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    except Exception:
        pass
    try:
        return str(value)
    except Exception as exc:
        raise UnshowableResultError(
            f"its result (of type {type(value).__name__}) cannot be shown as text ({describe_error(exc)})"
        ) from None


def to_observation(value: Any) -> str:
    """`result_text(value)`, or a note saying why there is none; never raises."""
    try:
        return result_text(value)
    except UnshowableResultError as exc:
        return f"[{exc}]"


def describe_error(exc: BaseException) -> str:
    """What went wrong, for the model: a `ToolException`'s message as is (the tool wrote it for the model),
    `sys.exit()` as such, a pydantic `ValidationError` as its problems without the values it was given,
    anything else as `Type: message`. Never raises, even when `str(exc)` does."""
    if isinstance(exc, SystemExit):
        return f"the tool called sys.exit({'' if exc.code is None else _safe_repr(exc.code)})"
    if isinstance(exc, ValidationError):
        # pydantic's own message repeats every input value: for a tool with injected arguments, the agent's
        # state or secrets from the run's context.
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'input'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
        return f"ValidationError: {problems}"
    try:
        message = str(exc)
    except Exception:
        message = "(its message cannot be shown)"
    if isinstance(exc, ToolException):
        return message
    if not isinstance(exc, Exception):
        return f"the tool raised {type(exc).__name__}" + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {message}"


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
