"""The text protocols, react and call_tool: the model writes one decision as plain text lines, a call
(`Action: tool[argument]`, `CALL_TOOL(tool, {...})`) or a labelled answer, read tolerantly.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage

from reinloop.protocols.extraction import (
    MAX_REPLY_CHARS,
    NESTED_TOO_DEEPLY,
    QUOTED_INPUT_CHARS,
    _name_problem,
    _resolve_name,
)
from reinloop.protocols.interface import new_call_id
from reinloop.protocols.written import WrittenProtocol
from reinloop.state import Decision, act, answer, unparsable
from reinloop.text import truncate
from reinloop.tools.registry import ToolRegistry

# A code fence around a text decision: a line holding only a fence (with its language). Fences inside a line
# are left alone, but for one at the very start or end of the reply: an argument may hold some (markdown).
_FENCE_LINE = re.compile(r"^[ \t]*```[\w-]*[ \t]*$", re.MULTILINE)
# A react label: at the start of a line in any case (after list or emphasis marks), or inside a line as
# written ("Thought: I will add. Action: add[...]"); the lower-case word "action:" inside a thought is prose.
_REACT_LABEL = re.compile(
    r"^[ \t>*#_-]*(?i:(thought|action[ \t_-]*input|action|observation|final[ \t_-]*answer))[ \t*_]*:(?:\*\*)?"
    r"|(?<=\s)(Action Input|Action|Observation|Final Answer)[ \t*_]*:(?:\*\*)?",
    re.MULTILINE,
)
_CALL_TOOL = re.compile(r"\bcall[ \t_-]?tool[ \t]*\(", re.IGNORECASE)
# The tool name in CALL_TOOL(...): up to the comma (or the closing parenthesis of a call without arguments).
_CALL_TOOL_NAME = re.compile(r"([^,(){}\n]*)([,)]?)")
_FINAL_LABEL = re.compile(
    r"^[ \t>*#_-]*(?i:final(?:[ \t_-]*answer)?)[ \t*_]*:(?:\*\*)?|(?<=\s)FINAL[ \t]*:", re.MULTILINE
)
_THOUGHT_LABEL = re.compile(r"^[ \t>*#_-]*thought[ \t*_]*:(?:\*\*)?", re.IGNORECASE)
_QUOTES = "\"'`"
# How an argument object is shown in the format's examples.
_EXAMPLE_OBJECT = '{"name": "value", "other": 3}'


@dataclass(frozen=True, slots=True)
class _Section:
    """One labelled part of a react reply: its label's kind ("thought", "action", "actioninput",
    "observation", "finalanswer"), where the label starts, where its text starts, and where the next label starts."""

    kind: str
    start: int
    body: int
    end: int


class _TextProtocol(WrittenProtocol):
    """A protocol whose model writes one decision as plain text lines (a call or a labelled answer), in the
    form its instructions show, with the tools listed by signature."""

    # How a final answer starts, e.g. "Final Answer:".
    answer_label: ClassVar[str]

    @abstractmethod
    def format_call(self, name: str, argument: str) -> str:
        """One call as the model writes it, with `argument` the text of its arguments."""

    @abstractmethod
    def read(self, text: str, registry: ToolRegistry) -> tuple[Decision, str]:
        """The decision in `text` (fences removed), and the reasoning before a call; ValueError saying what
        is wrong when there is none."""

    def format_decision(self, thought: str, calls: Sequence[Any]) -> str:
        """A stored decision as the model writes it: the thought, then each call (its arguments as JSON)."""
        lines = [thought] if thought else []
        lines += [self.format_call(call["name"], json.dumps(call["args"], ensure_ascii=False)) for call in calls]
        return "\n".join(lines)

    def format_answer(self, answer: str, thought: str = "") -> str:
        return "\n".join(filter(None, [self.format_decision(thought, []), f"{self.answer_label} {answer}"]))

    def parse(self, reply: BaseMessage, registry: ToolRegistry) -> tuple[Decision, AIMessage | None]:
        text = reply.text
        try:
            decision, thought = self.read(_unfenced(text), registry)
        except ValueError as exc:
            return unparsable(text, str(exc)), None
        if decision["kind"] == "answer":
            return decision, AIMessage(content=decision["answer"], id=reply.id)
        return decision, AIMessage(content=thought, tool_calls=decision["calls"], id=reply.id)

    def tool_list(self, registry: ToolRegistry) -> str:
        return "Tools:\n" + "\n".join(
            f"- {entry.signature}: {' '.join(entry.tool.description.split())}" for entry in registry
        )

    def _answer(self, text: str) -> Decision:
        if not text.strip():
            raise ValueError(f"{self.answer_label!r} is followed by no answer; write {self.answer_label} <the answer>")
        return answer(text.strip())

    def _call(self, name_text: str, registry: ToolRegistry, args: Callable[[str], dict[str, Any]]) -> Decision:
        """The decision to call the tool `name_text` names, with the arguments `args` reads for that name."""
        name = self._tool_name(name_text, registry)
        return act([{"name": name, "args": args(name), "id": new_call_id(), "type": "tool_call"}])

    def _tool_name(self, text: str, registry: ToolRegistry) -> str:
        name = text.strip().strip(_QUOTES + "*").strip()
        if not name:
            raise ValueError(f"the call names no tool; write {self.format_call('<tool name>', '<argument>')}")
        if problem := _name_problem(name):
            raise ValueError(problem)
        if any(char.isspace() for char in name):
            raise ValueError(
                f"{truncate(name, QUOTED_INPUT_CHARS)!r} is not a tool name; write "
                f"{self.format_call('<tool name>', '<argument>')} with a name from the list"
            )
        return _resolve_name(name, registry)

    def _arguments(
        self, text: str, start: int, end: int, brackets: str, name: str, registry: ToolRegistry
    ) -> dict[str, Any]:
        """The arguments of `name` written from `start` to the closing bracket of `brackets` (an opening and a
        closing character, or "" when they run to `end`): a JSON object, or one bare value."""
        first = start + len(text[start:end]) - len(text[start:end].lstrip())
        if text.startswith("{", first):
            return self._json_arguments(text, first, end, brackets[1:], name)
        close = _closing(text, start, end, brackets) if brackets else end
        if close == -1:
            raise ValueError(
                f"the argument of {name!r} is not closed with {brackets[1]!r}; "
                f"write {self.format_call(name, '<argument>')}"
            )
        return self._bare_arguments(name, text[start:close], registry)

    def _json_arguments(self, text: str, first: int, end: int, closer: str, name: str) -> dict[str, Any]:
        try:
            obj, stop = json.JSONDecoder().raw_decode(text, first)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"the arguments of {name!r} are not valid JSON ({exc.msg} at {text[exc.pos : exc.pos + 20]!r}); "
                f"write one JSON object with double-quoted keys and strings: {self.format_call(name, _EXAMPLE_OBJECT)}"
            ) from None
        except RecursionError:
            raise ValueError(NESTED_TOO_DEEPLY) from None
        after = stop + len(text[stop:end]) - len(text[stop:end].lstrip())
        if closer and after < end and text[after] != closer:
            raise ValueError(
                f"after the JSON arguments of {name!r} came {text[after : after + 20]!r} instead of {closer!r}; "
                f"write {self.format_call(name, _EXAMPLE_OBJECT)}"
            )
        return dict(obj)

    def _bare_arguments(self, name: str, text: str, registry: ToolRegistry) -> dict[str, Any]:
        """One value written alone: the argument of a one-argument tool (or of the one required argument)."""
        value, entry = _unquoted(text.strip()), registry.get(name)
        if entry is None or not value:
            return {}  # an unknown tool gets validate_args' feedback; a missing argument, its schema's
        fields = list(entry.schema_json.get("properties", {}))
        required = list(entry.schema_json.get("required", []))
        if len(fields) == 1 or len(required) == 1:
            return {(fields if len(fields) == 1 else required)[0]: value}
        if not fields:
            return {}
        example = "{" + ", ".join(f'"{field}": ...' for field in (required or fields)) + "}"
        raise ValueError(
            f"{name!r} takes several arguments ({', '.join(fields)}), not one value; write them as one JSON "
            f"object: {self.format_call(name, example)}"
        )


class ReactProtocol(_TextProtocol):
    """Seed 002's ReAct text: `Thought: ...` then `Action: tool[argument]`, or `Final Answer: ...`.

    The argument is one value for a one-argument tool (`Action: calculator[2 + 3]`), else a JSON object
    (`Action: web_search[{"query": "x", "max_results": 3}]`). Read tolerantly: labels in any case or with
    markdown emphasis, code fences, a missing `Thought:`, `tool(argument)`, `Action Input:` on its own line,
    and anything after the action (such as an `Observation:` the model imagined) is ignored.
    """

    name = "react"
    answer_label = "Final Answer:"
    expected_format = (
        'a "Thought: <your reasoning>" line, then either "Action: <tool name>[<argument>]" (the value alone for a '
        'tool with one argument, else a JSON object of the arguments) or "Final Answer: <the answer>"'
    )

    def format_call(self, name: str, argument: str) -> str:
        return f"Action: {name}[{argument}]"

    def format_decision(self, thought: str, calls: Sequence[Any]) -> str:
        return super().format_decision(f"Thought: {thought}" if thought else "", calls)

    def instructions(self, registry: ToolRegistry) -> str:
        return (
            "Work one step at a time. Each reply is\n"
            "Thought: <your reasoning>\n"
            "Action: <tool name>[<argument>]\n"
            "For a tool with one argument write its value alone, e.g. Action: tool[some value]; otherwise "
            f"write the arguments as one JSON object, e.g. Action: tool[{_EXAMPLE_OBJECT}]. Then stop: the "
            "tool's result comes back as an Observation. When you know the answer, reply\n"
            "Thought: <your reasoning>\n"
            "Final Answer: <the answer>\n" + self.tool_list(registry)
        )

    def read(self, text: str, registry: ToolRegistry) -> tuple[Decision, str]:
        sections = _react_sections(text)
        first = next((section for section in sections if section.kind in ("action", "finalanswer")), None)
        if first is None:
            raise ValueError(
                "the reply has no 'Action: <tool name>[<argument>]' line and no 'Final Answer: <the answer>'"
            )
        if first.kind == "finalanswer":
            return self._answer(text[first.body : first.end]), ""
        thought = next((s for s in sections if s.kind == "thought" and s.start < first.start), None)
        reasoning = text[thought.body if thought else 0 : first.start].strip()
        following = next((s for s in sections if s.start > first.start), None)
        return self._action(text, first, following, registry), reasoning

    def _action(self, text: str, action: _Section, following: _Section | None, registry: ToolRegistry) -> Decision:
        body = text[action.body : action.end]
        opener = min((at for at in (body.find("["), body.find("(")) if at != -1), default=-1)
        if opener != -1:
            brackets = "[]" if body[opener] == "[" else "()"
            start = action.body + opener + 1
            return self._call(
                body[:opener], registry, lambda name: self._arguments(text, start, action.end, brackets, name, registry)
            )
        if following is not None and following.kind == "actioninput":
            return self._call(
                body, registry, lambda name: self._arguments(text, following.body, following.end, "", name, registry)
            )
        return self._call(body.strip().split("\n")[0], registry, lambda name: self._no_argument(name, registry))

    def _no_argument(self, name: str, registry: ToolRegistry) -> dict[str, Any]:
        entry = registry.get(name)
        if entry is not None and not entry.schema_json.get("required"):
            return {}  # `Action: current_time`: a tool that needs no argument
        raise ValueError(f"the Action {name!r} has no [argument]; write {self.format_call(name, '<argument>')}")


class CallToolProtocol(_TextProtocol):
    """Seed 004's text: `CALL_TOOL(tool, {"argument": value})`, or `FINAL: <the answer>`.

    A one-argument tool also takes its value alone (`CALL_TOOL(calculator, 2 + 3)`). Read tolerantly:
    `call_tool`/`CALL TOOL` in any case, spaces, a quoted tool name, code fences, reasoning before the call,
    and anything after it.
    """

    name = "call_tool"
    answer_label = "FINAL:"
    expected_format = (
        '"CALL_TOOL(<tool name>, {<the arguments as one JSON object>})" (the value alone for a tool with one '
        'argument), or "FINAL: <the answer>"'
    )

    def format_call(self, name: str, argument: str) -> str:
        return f"CALL_TOOL({name}, {argument})"

    def instructions(self, registry: ToolRegistry) -> str:
        return (
            "Work one step at a time. To use a tool, reply with one call:\n"
            "CALL_TOOL(<tool name>, {<the arguments as one JSON object>})\n"
            f"e.g. CALL_TOOL(tool, {_EXAMPLE_OBJECT}); a tool with one argument also takes its value alone, "
            "e.g. CALL_TOOL(tool, some value). Then stop: the tool's result comes back as an Observation. When "
            "you know the answer, reply\n"
            "FINAL: <the answer>\n" + self.tool_list(registry)
        )

    def read(self, text: str, registry: ToolRegistry) -> tuple[Decision, str]:
        call, final = _CALL_TOOL.search(text), _FINAL_LABEL.search(text)
        if final is not None and (call is None or final.start() < call.start()):
            return self._answer(text[final.end() :]), ""
        if call is None:
            raise ValueError("the reply has no 'CALL_TOOL(<tool name>, {<arguments>})' and no 'FINAL: <the answer>'")
        named = _CALL_TOOL_NAME.match(text, call.end())
        assert named is not None  # the pattern matches the empty string
        reasoning = _THOUGHT_LABEL.sub("", text[: call.start()].strip()).strip()
        return self._call(
            named.group(1), registry, lambda name: self._after_name(text, named, name, registry)
        ), reasoning

    def _after_name(self, text: str, named: re.Match[str], name: str, registry: ToolRegistry) -> dict[str, Any]:
        if named.group(2) == ")":
            return {}  # CALL_TOOL(current_time)
        if named.group(2) != ",":
            raise ValueError(
                f"CALL_TOOL({name} is not followed by a comma and the arguments; write "
                f"{self.format_call(name, _EXAMPLE_OBJECT)}"
            )
        return self._arguments(text, named.end(), len(text), "()", name, registry)


def _unfenced(text: str) -> str:
    if len(text) > MAX_REPLY_CHARS:
        raise ValueError(f"the reply is {len(text)} characters long; expected one short decision")
    unfenced = _FENCE_LINE.sub("", text).strip().removeprefix("```").removesuffix("```").strip()
    if not unfenced:
        raise ValueError("the reply is empty")
    return unfenced


def _react_sections(text: str) -> list[_Section]:
    labels = list(_REACT_LABEL.finditer(text))
    ends = [label.start() for label in labels[1:]] + [len(text)] if labels else []
    return [
        _Section(re.sub("[^a-z]", "", (label.group(1) or label.group(2)).lower()), label.start(), label.end(), end)
        for label, end in zip(labels, ends, strict=True)
    ]


def _closing(text: str, start: int, end: int, brackets: str) -> int:
    """Where the bracket that closes the one opened before `start` is, before `end`; -1 if none is."""
    opener, closer = brackets[0], brackets[1]
    depth = 0
    for index in range(start, end):
        if text[index] == opener:
            depth += 1
        elif text[index] == closer:
            if depth == 0:
                return index
            depth -= 1
    return -1


def _unquoted(value: str) -> str:
    """`value` without the quotes around it: models quote a bare argument (seed 002: `Calculator["2+3"]`)."""
    if len(value) < 2 or value[0] != value[-1] or value[0] not in _QUOTES:
        return value
    if value[0] == '"':
        try:
            decoded = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, str):
            return decoded
    return value[1:-1]
