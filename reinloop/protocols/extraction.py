"""Reading a decision out of a reply's text: the JSON object in it, whether alone, in a code fence or in prose
(`extract_json_object`), the limits that keep a runaway reply from being read at length, and the checks
shared by the protocols on a tool name the model wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from reinloop.tools.registry import ToolRegistry

# Replies longer than this are not scanned for JSON: a runaway generation is a parse error, not a DoS.
MAX_REPLY_CHARS = 100_000
# How many "{" positions are tried when the JSON object is buried in prose.
MAX_JSON_CANDIDATES = 200
# No tool has a name this long: a longer one is an unreadable reply, not something to store whole.
MAX_TOOL_NAME_CHARS = 200
# Python's JSON parser follows nesting by recursion and raises RecursionError near 1,000 levels ("[" * 1000):
# for a reply, that is invalid JSON like any other.
NESTED_TOO_DEEPLY = "invalid JSON: nested too deeply; reply with one flat decision object"
# A wrong "action_input" is quoted back to the model up to this length.
QUOTED_INPUT_CHARS = 200

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """The decision object in a model reply: the whole reply, a code fence, or the first object in prose.

    Prefers an object with an "action" key. Raises ValueError saying what was wrong.
    """
    if len(text) > MAX_REPLY_CHARS:
        raise ValueError(f"the reply is {len(text)} characters long; expected one short JSON object")
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply is empty")
    search = _ObjectSearch()
    candidates = [stripped, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        if (obj := search.whole(candidate)) is not None:
            return obj
    decoder = json.JSONDecoder()
    start = text.find("{")
    tried = 0
    while start != -1 and tried < MAX_JSON_CANDIDATES:
        tried += 1
        if (obj := search.prefix(decoder, text, start)) is not None:
            return obj
        start = text.find("{", start + 1)
    return search.result("{" in text)


class _ObjectSearch:
    """What `extract_json_object` has found so far: objects without "action", and the first error."""

    def __init__(self) -> None:
        self.found: list[dict[str, Any]] = []
        self.first_error: str | None = None
        self.too_deep = False

    def whole(self, candidate: str) -> dict[str, Any] | None:
        """`candidate` as one JSON document: the object if it has an "action" key, else None."""
        return self._attempt(lambda: json.loads(candidate), lambda exc: f"line {exc.lineno} column {exc.colno}")

    def prefix(self, decoder: json.JSONDecoder, text: str, start: int) -> dict[str, Any] | None:
        """The JSON value that starts at `start` in `text`: the object if it has an "action" key, else None."""
        return self._attempt(lambda: decoder.raw_decode(text, start)[0], lambda exc: f"position {exc.pos}")

    def _attempt(self, parse: Callable[[], Any], where: Callable[[json.JSONDecodeError], str]) -> dict[str, Any] | None:
        try:
            obj = parse()
        except json.JSONDecodeError as exc:
            self._error(f"invalid JSON: {exc.msg} at {where(exc)}")
            return None
        except RecursionError:
            self.too_deep = True
            return None
        return self._keep(obj)

    def result(self, has_brace: bool) -> dict[str, Any]:
        """The first object found without an "action" key, or ValueError saying why there is none."""
        if self.found:
            return self.found[0]
        if self.too_deep:
            raise ValueError(NESTED_TOO_DEEPLY)
        if not has_brace:
            raise ValueError("the reply contains no JSON object")
        raise ValueError(self.first_error or "no JSON object could be read from the reply")

    def _error(self, message: str) -> None:
        self.first_error = self.first_error or message

    def _keep(self, obj: object) -> dict[str, Any] | None:
        if not isinstance(obj, dict):
            return None
        if "action" in obj:
            return obj
        self.found.append(obj)
        return None


def _name_problem(name: str) -> str | None:
    if len(name) <= MAX_TOOL_NAME_CHARS:
        return None
    return f"a tool name of {len(name)} characters; name one of the tools exactly, as listed"


def _resolve_name(name: str, registry: ToolRegistry) -> str:
    """The registered tool `name` means: itself, or the one tool whose name differs from it only in case
    (seed 002's tools are `Calculator`, `Weather`)."""
    if name in registry:
        return name
    matches = [known for known in registry.names if known.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else name
