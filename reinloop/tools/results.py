"""What a tool produced, as the model will read it: result checks, result text and error text.

A check takes the raw return value and returns None when it is acceptable, else a short reason that is
shown to the model. Checks are chosen per tool in the `ToolRegistry`. `result_text` and `describe_error`
turn any return value and any exception into text; they are the only places that call a tool's `__str__`,
and neither lets an exception out that the caller does not expect. `content_text` is how LangChain message
content (content blocks, as MCP tools return them) reads as text: text blocks joined, anything else a short
placeholder, never a block's id or its base64 data. `refuse_lazy` turns a coroutine or generator that a tool
returned instead of its result into the error that says so. `handled_error` is what a tool's own
`handle_tool_error` makes of its `ToolException`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException
from pydantic import ValidationError

from reinloop.text import truncate

__all__ = [
    "BLOCK_TYPES",
    "ResultCheck",
    "UnshowableResultError",
    "accept_any",
    "content_text",
    "describe_error",
    "handled_error",
    "refuse_lazy",
    "reject_empty",
    "result_text",
    "to_observation",
]

ResultCheck = Callable[[Any], str | None]

# Texts that tools (and the seeds' mock tools) return when they found nothing but did not raise.
_MEANINGLESS_TEXT = frozenset({"none", "null", "nil", "undefined", "[]", "{}", '""', "''", "n/a"})

# Lazy values a tool returns by mistake instead of its result (a sync function that calls an async one
# without await, a generator expression where a list was meant), each with how to fix the tool; the first
# type that matches wins. {name} is the coroutine's or generator's own name.
LAZY_RESULTS: tuple[tuple[type, str], ...] = (
    (
        Coroutine,
        "it returned a coroutine ({name}) that nothing awaits, so its work never ran: define the tool with "
        "async def, so that it is awaited, or await the coroutine inside an async def tool",
    ),
    (
        AsyncGenerator,
        "it returned an async generator ({name}) that nothing iterates, so its items were never made: collect "
        "them in an async def tool ([item async for item in ...]) and return that list",
    ),
    (
        Generator,
        "it returned a generator ({name}) that nothing iterates, so its items were never made: return a list "
        "(list(...)) or the value itself instead of a generator",
    ),
)


# The content block types a tool's result may be made of (LangChain's, for tool messages): a list of dicts
# whose "type" is one of these is content; a list of records with other "type" values is data.
BLOCK_TYPES = frozenset(
    {"text", "image_url", "image", "json", "search_result", "custom_tool_call_output", "document", "file",
     "audio", "video", "text-plain", "plain-text"}
)  # fmt: skip
# A block's source shown in its placeholder is cut to this length (a URL can be long).
SOURCE_CHARS = 80


class UnshowableResultError(ValueError):
    """A tool's return value has no text form: its `__str__` raised, or it is an integer too long to print."""


def reject_empty(value: Any) -> str | None:
    """The default check: None, blank text, empty collections and null-like text are not results."""
    if isinstance(value, ToolMessage) or _is_blocks(value):
        value = content_text(value)
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
    if isinstance(value, ToolMessage) or _is_blocks(value):
        return content_text(value)
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


def content_text(content: Any) -> str:
    """LangChain message content (a ToolMessage's, a text, or a list of content blocks) as the model reads it:
    text blocks joined by newlines; an image, audio, file or other block as ``[image: image/png, 12.3 kB]``;
    block ids and base64 data left out, so that the same result reads the same on every call."""
    if isinstance(content, ToolMessage):
        content = content.content
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return result_text(content)
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in ("text", "text-plain", "plain-text"):
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "json":
            parts.append(result_text(block.get("json", block.get("data"))))
        else:
            parts.append(_placeholder(block))
    return "\n".join(parts)


def _is_blocks(value: Any) -> bool:
    """Whether `value` is a non-empty list of content blocks rather than data."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(block, dict) and block.get("type") in BLOCK_TYPES for block in value)
    )


def _placeholder(block: Any) -> str:
    """A non-text block in a few words: its kind, its MIME type, its size or where it is."""
    if not isinstance(block, dict):
        return f"[{type(block).__name__}]"
    kind = str(block.get("type", "block")).removesuffix("_url")
    details = [str(block["mime_type"])] if block.get("mime_type") else []
    data = block.get("base64") or block.get("data")
    if isinstance(data, str):
        details.append(_size(len(data) * 3 // 4))  # base64: four characters for three bytes
    elif isinstance(url := block.get("url") or block.get("image_url"), str | dict):
        where = url.get("url", "") if isinstance(url, dict) else url
        if not str(where).startswith("data:"):
            details.append(f"at {truncate(str(where), SOURCE_CHARS)}")
    elif block.get("file_id"):
        details.append(f"file {truncate(str(block['file_id']), SOURCE_CHARS)}")
    return f"[{kind}: {', '.join(details)}]" if details else f"[{kind}]"


def _size(size: int) -> str:
    if size < 1_000:
        return f"{size} B"
    return f"{size / 1_000:.1f} kB" if size < 1_000_000 else f"{size / 1_000_000:.1f} MB"


def handled_error(exc: ToolException, handler: Any) -> str:
    """The text of a `ToolException` as the tool's own `handle_tool_error` (`handler`) words it, as LangChain
    would: True, the exception's message; a string, that string; a callable, what it returns (text or
    content blocks). A handler that raises, or returns something else, leaves `describe_error`'s text."""
    if isinstance(handler, str):
        return handler
    if callable(handler):
        try:
            return content_text(handler(exc))
        except Exception:
            return describe_error(exc)
    return str(exc.args[0]) if exc.args else "Tool execution error"


def to_observation(value: Any) -> str:
    """`result_text(value)`, or a note saying why there is none; never raises."""
    try:
        return result_text(value)
    except UnshowableResultError as exc:
        return f"[{exc}]"


def refuse_lazy(value: Any) -> str | None:
    """Why `value` is no result if it is a coroutine, an async generator or a generator, with how to fix the
    tool, else None. Closes such a value: its work is dropped, and no 'never awaited' warning follows it."""
    for lazy_type, template in LAZY_RESULTS:
        if isinstance(value, lazy_type):
            _close(value)
            return template.format(name=getattr(value, "__qualname__", type(value).__name__))
    return None


def _close(lazy: Any) -> None:
    # A cleanup that raises, or an async generator's that awaits (which cannot finish without an event loop,
    # as an abandoned async generator's cannot), leaves the call the same error.
    with contextlib.suppress(Exception):
        if not isinstance(lazy, AsyncGenerator):
            lazy.close()
            return
        closing = lazy.aclose()  # one step of it ends a cleanup that does not await (StopIteration)
        try:
            closing.send(None)
        finally:
            closing.close()


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
