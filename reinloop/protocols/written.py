"""The protocols whose model writes each decision as text (`WrittenProtocol`: json, react, call_tool), and the
json protocol: one `{"thought", "action", "action_input"}` object a reply.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable

from reinloop.protocols.extraction import NESTED_TOO_DEEPLY, QUOTED_INPUT_CHARS, _name_problem, extract_json_object
from reinloop.protocols.interface import DecisionProtocol, new_call_id
from reinloop.state import Decision, act, answer, unparsable
from reinloop.text import truncate
from reinloop.tools.registry import ToolRegistry

FINAL_ANSWER_ACTION = "final_answer"
# A JSON Schema's type names, and the keywords a schema copied from a tool list has beside its type.
_SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_SCHEMA_KEYWORDS = frozenset({"type", "title", "description", "default", "enum", "items", "properties", "required"})
# How the text-writing protocols show a tool's result to the model: a user turn starting with this label.
OBSERVATION_LABEL = "Observation: "


class WrittenProtocol(DecisionProtocol):
    """A protocol whose model writes each decision as text (json, react, call_tool): the tools are listed in
    the instructions (`tool_list`), and the window is shown back as the model writes it, each decision with
    `format_decision`, each answer of an earlier run with `format_answer`, each tool result as an
    `Observation:` turn."""

    @abstractmethod
    def format_decision(self, thought: str, calls: Sequence[Any]) -> str:
        """A stored decision (its thought and calls) as the model writes it."""

    @abstractmethod
    def tool_list(self, registry: ToolRegistry) -> str:
        """The tools as the instructions list them."""

    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        return model

    def render(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        rendered: list[BaseMessage] = []
        for message in messages:
            if isinstance(message, AIMessage) and message.tool_calls:
                # Stored as the thought with native tool calls; shown back in the format the model writes.
                rendered.append(
                    AIMessage(content=self.format_decision(message.text, message.tool_calls), id=message.id)
                )
            elif isinstance(message, AIMessage) and message.name is None:
                # A final answer of an earlier run on the thread, in the form the model writes one.
                rendered.append(AIMessage(content=self.format_answer(message.text), id=message.id))
            elif isinstance(message, AIMessage):
                rendered.append(AIMessage(content=message.content, id=message.id))
            elif isinstance(message, ToolMessage):
                rendered.append(HumanMessage(content=OBSERVATION_LABEL + message.text, id=message.id))
            else:
                rendered.append(message)
        return rendered


class JsonProtocol(WrittenProtocol):
    """The seeds' protocol: the model writes `{"thought", "action", "action_input"}` as text.

    For models without tool calling (small local models). The object is found in code fences or prose.
    """

    name = "json"
    expected_format = (
        'exactly one JSON object {"thought": "...", "action": "<tool name or final_answer>", '
        '"action_input": {<the tool\'s arguments>}}, with double-quoted keys and strings'
    )

    def instructions(self, registry: ToolRegistry) -> str:
        return (
            "Reply with exactly one JSON object and nothing else:\n"
            '{"thought": "<short reasoning>", "action": "<tool name>", "action_input": {<arguments>}}\n'
            f'When you know the answer, reply {{"thought": "...", "action": "{FINAL_ANSWER_ACTION}", '
            '"action_input": "<the answer>"}.\n' + self.tool_list(registry)
        )

    def tool_list(self, registry: ToolRegistry) -> str:
        return "Tools:\n" + registry.describe()

    def format_decision(self, thought: str, calls: Sequence[Any]) -> str:
        # One action per reply: the first call (parse reads one object, so a stored decision has one).
        action = {"thought": thought, "action": calls[0]["name"], "action_input": calls[0]["args"]}
        return json.dumps(action, ensure_ascii=False)

    def format_answer(self, answer: str, thought: str = "") -> str:
        return json.dumps(
            {"thought": thought, "action": FINAL_ANSWER_ACTION, "action_input": answer}, ensure_ascii=False
        )

    def parse(self, reply: BaseMessage, registry: ToolRegistry) -> tuple[Decision, AIMessage | None]:
        text = reply.text
        try:
            obj = extract_json_object(text)
            decision = _decision_from_object(obj, registry)
        except ValueError as exc:
            return unparsable(text, str(exc)), None
        if decision["kind"] == "answer":
            return decision, AIMessage(content=decision["answer"], id=reply.id)
        thought = obj.get("thought")
        thought = thought if isinstance(thought, str) else ""
        return decision, AIMessage(content=thought, tool_calls=decision["calls"], id=reply.id)


def _decision_from_object(obj: dict[str, Any], registry: ToolRegistry) -> Decision:
    action = obj.get("action")
    if not isinstance(action, str) or not action.strip():
        raise ValueError(
            f'the JSON object has no "action" string (keys: {sorted(obj)}); '
            f'set "action" to a tool name or "{FINAL_ANSWER_ACTION}"'
        )
    action = action.strip()
    if problem := _name_problem(action):
        raise ValueError(problem)
    action_input = obj.get("action_input")
    if action == FINAL_ANSWER_ACTION:
        if isinstance(action_input, dict) and _schema_echo(action_input):
            raise ValueError(
                f'"{FINAL_ANSWER_ACTION}" needs the answer itself as "action_input", not a JSON Schema '
                f"({truncate(_json_text(action_input), QUOTED_INPUT_CHARS)}); write "
                f'{{"action": "{FINAL_ANSWER_ACTION}", "action_input": "<the answer>"}}'
            )
        if isinstance(action_input, dict) and "answer" in action_input:
            action_input = action_input["answer"]
        elif isinstance(action_input, dict) and len(action_input) == 1:
            # Small models wrap the answer in an object named after the last tool's argument.
            (action_input,) = action_input.values()
        text = action_input if isinstance(action_input, str) else _json_text(action_input)
        if action_input is None or not text.strip():
            raise ValueError(f'"{FINAL_ANSWER_ACTION}" needs the answer as "action_input"')
        return answer(text.strip())
    args = _tool_args(action, action_input, registry)
    return act([{"name": action, "args": args, "id": new_call_id(), "type": "tool_call"}])


def _schema_echo(value: dict[str, Any]) -> bool:
    """Whether an answer object is a JSON Schema, as small models copy from the tool list: a JSON type name as
    its "type" and nothing but schema keywords ({"type": "string"}). Taken as the answer, its one key would be
    unwrapped into "string"."""
    kind = value.get("type")
    return isinstance(kind, str) and kind in _SCHEMA_TYPES and set(value) <= _SCHEMA_KEYWORDS


def _json_text(value: Any) -> str:
    """`value` (read from a reply) as JSON text; nesting too deep to write is invalid JSON, not a crash."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        raise ValueError(NESTED_TOO_DEEPLY) from None


def _tool_args(action: str, action_input: Any, registry: ToolRegistry) -> dict[str, Any]:
    if action_input is None:
        return {}
    if isinstance(action_input, str) and action_input.strip().startswith("{"):
        # Models often double-encode: "action_input": "{\"a\": 1}".
        try:
            decoded = json.loads(action_input)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            return decoded
    if isinstance(action_input, dict):
        return action_input
    entry = registry.get(action)
    fields = list(entry.schema_json.get("properties", {})) if entry else []
    if len(fields) == 1:
        # A bare value for a one-argument tool, as in the seeds: {"action": "calculator", "action_input": "2+2"}.
        return {fields[0]: action_input}
    raise ValueError(
        f'"action_input" for {action!r} must be a JSON object with the tool\'s arguments '
        f"{fields}, got {truncate(_json_text(action_input), QUOTED_INPUT_CHARS)}"
    )
