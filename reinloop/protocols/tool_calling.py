"""The tool_calling protocol: native tool calls through `bind_tools`, and the calls a model writes as its
reply's text instead (`text_tool_calls`), as open models do when their server's tool-call template fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from typing_extensions import TypeIs

from reinloop.protocols.extraction import _FENCE, MAX_REPLY_CHARS, _name_problem, _resolve_name
from reinloop.protocols.interface import DecisionProtocol, new_call_id
from reinloop.state import Decision, act, answer, unparsable
from reinloop.storable import clean_text
from reinloop.tools.registry import ToolRegistry

# A tool-call id from the model longer than this (or not a string, or holding characters that are cleaned
# before they are saved, which could make two ids one) is replaced by one of ours: ids are stored with every
# call and its result, and providers limit them (OpenAI: 40 characters).
MAX_CALL_ID_CHARS = 64


class ToolCallingProtocol(DecisionProtocol):
    """Native tool calls through `bind_tools`: for models and servers that support tool calling."""

    name = "tool_calling"
    expected_format = "a tool call with JSON object arguments, or a plain-text final answer"

    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        return model.bind_tools(registry.tools) if len(registry) else model

    def instructions(self, registry: ToolRegistry) -> str:
        return ""

    def tool_schemas(self, registry: ToolRegistry) -> list[dict[str, Any]]:
        return [convert_to_openai_tool(tool) for tool in registry.tools]

    def render(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(messages)

    def parse(self, reply: BaseMessage, registry: ToolRegistry) -> tuple[Decision, AIMessage | None]:
        if not isinstance(reply, AIMessage):
            return unparsable(str(reply.content), "the reply is not an AI message"), None
        if reply.invalid_tool_calls:
            bad = reply.invalid_tool_calls[0]
            raw = f"{bad.get('name')}({bad.get('args')})"
            error = bad.get("error") or "the tool call's arguments are not a valid JSON object"
            return unparsable(raw, error), None
        if reply.tool_calls:
            calls: list[dict[str, Any]] = []
            seen: set[str] = set()
            for call in reply.tool_calls:
                if problem := _name_problem(call["name"]):
                    return unparsable(call["name"], problem), None
                # Every call needs its own short id: results are matched to calls by it.
                call_id = call.get("id")
                if not _usable_call_id(call_id) or call_id in seen:
                    call_id = new_call_id()
                seen.add(call_id)
                calls.append({**call, "id": call_id})
            stored = reply if calls == reply.tool_calls else reply.model_copy(update={"tool_calls": calls})
            return act(calls), stored
        text = reply.text.strip()
        if not text:
            return unparsable("", "the reply is empty"), None
        if (written := text_tool_calls(text, registry)) is not None:
            return act([dict(call) for call in written]), AIMessage(content="", tool_calls=written, id=reply.id)
        return answer(text), reply


# The keys a tool call written as text may hold its arguments under: OpenAI's and Hermes' "arguments" (an
# object, or an object's JSON text), Llama 3's "parameters", and "args".
TEXT_CALL_ARGUMENT_KEYS = ("arguments", "parameters", "args")
_TOOL_CALL_TAGS = re.compile(r"^<tool_call>\s*(.*?)\s*</tool_call>$", re.DOTALL)


def text_tool_calls(text: str, registry: ToolRegistry) -> list[ToolCall] | None:
    """The tool calls a model wrote as its reply's text instead of as tool calls, as open models do when
    their server's tool-call template fails: the whole reply (or a code fence, or `<tool_call>` tags) is a
    JSON object, or a list of them, each naming a registered tool ("name", or "function" with a "name") with
    its arguments as an object under exactly one of `TEXT_CALL_ARGUMENT_KEYS`. None for anything else (an answer), so
    that a JSON answer is never taken for a call unless it names a tool and holds only a call's keys."""
    body = text.strip()
    for pattern in (_TOOL_CALL_TAGS, _FENCE):
        if (match := pattern.fullmatch(body)) is not None:
            body = match.group(1).strip()
    if not body.startswith(("{", "[")) or len(body) > MAX_REPLY_CHARS:
        return None
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    objects = value if isinstance(value, list) and value else [value]
    calls = [_text_call(obj, registry) for obj in objects]
    return None if any(call is None for call in calls) else [call for call in calls if call is not None]


def _text_call(obj: object, registry: ToolRegistry) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(function := obj.get("function"), dict):  # {"type": "function", "function": {...}}
        obj = function
    name = obj.get("name")
    keys = [key for key in TEXT_CALL_ARGUMENT_KEYS if key in obj]
    if not isinstance(name, str) or len(keys) != 1 or set(obj) - {"name", "type", "id", *keys}:
        return None
    name = _resolve_name(name.strip(), registry)
    args: Any = obj[keys[0]]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            return None
    if name not in registry or not isinstance(args, dict):
        return None
    return {"name": name, "args": args, "id": new_call_id(), "type": "tool_call"}


def _usable_call_id(call_id: object) -> TypeIs[str]:
    return isinstance(call_id, str) and 0 < len(call_id) <= MAX_CALL_ID_CHARS and clean_text(call_id) == call_id
