"""Decision protocols: how the model states a decision, and how reinloop reads it.

A protocol binds the model, adds its instructions to the system prompt, renders the window for the model,
and parses each reply into a `Decision`. Replies are stored in one normal form whatever the protocol: an
`AIMessage` whose text is the model's reasoning and whose `tool_calls` hold the requested calls, answered
by one `ToolMessage` each; a final answer is an `AIMessage` holding the answer.

`PROTOCOLS` maps each `ProtocolName` (what `AgentConfig.protocol` accepts) to its class, and `get_protocol`
is the one place that picks an agent's protocol, from the config or a custom `DecisionProtocol` object.
`read_reply` is how decide reads every reply, whatever the protocol: a reply cut at the output limit is
unparsable, never handed to the protocol.
"""

from __future__ import annotations

import json
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from typing_extensions import TypeIs

from reinloop.config import AgentConfig, ProtocolName
from reinloop.errors import ConfigurationError
from reinloop.state import Decision, act, answer, unparsable
from reinloop.storable import clean_text
from reinloop.text import truncate
from reinloop.tools.registry import ToolRegistry

__all__ = [
    "CUT_REPLY_TEMPLATE",
    "FINAL_ANSWER_ACTION",
    "OBSERVATION_LABEL",
    "PROTOCOLS",
    "CallToolProtocol",
    "DecisionProtocol",
    "JsonProtocol",
    "ReactProtocol",
    "ToolCallingProtocol",
    "WrittenProtocol",
    "cut_off",
    "extract_json_object",
    "get_protocol",
    "read_reply",
]

FINAL_ANSWER_ACTION = "final_answer"
# How the text-writing protocols show a tool's result to the model: a user turn starting with this label.
OBSERVATION_LABEL = "Observation: "

# Replies longer than this are not scanned for JSON: a runaway generation is a parse error, not a DoS.
MAX_REPLY_CHARS = 100_000
# How many "{" positions are tried when the JSON object is buried in prose.
MAX_JSON_CANDIDATES = 200
# A tool-call id from the model longer than this (or not a string, or holding characters that are cleaned
# before they are saved, which could make two ids one) is replaced by one of ours: ids are stored with every
# call and its result, and providers limit them (OpenAI: 40 characters).
MAX_CALL_ID_CHARS = 64
# No tool has a name this long: a longer one is an unreadable reply, not something to store whole.
MAX_TOOL_NAME_CHARS = 200
# Python's JSON parser follows nesting by recursion and raises RecursionError near 1,000 levels ("[" * 1000):
# for a reply, that is invalid JSON like any other.
NESTED_TOO_DEEPLY = "invalid JSON: nested too deeply; reply with one flat decision object"
# A wrong "action_input" is quoted back to the model up to this length.
QUOTED_INPUT_CHARS = 200
# Where LangChain chat models report why a reply stopped (`response_metadata`), and the reasons that mean an
# output limit cut it, lower-cased: OpenAI and OpenAI-compatible servers (llama.cpp, vLLM) finish_reason
# "length"; Anthropic stop_reason "max_tokens" (or "model_context_window_exceeded"); Google finish_reason
# MAX_TOKENS (an enum member); Ollama done_reason "length"; Bedrock Converse stopReason "max_tokens"; OpenAI's
# Responses API incomplete_details.reason "max_output_tokens".
STOP_REASON_KEYS = ("finish_reason", "stop_reason", "stopReason", "done_reason")
CUT_STOP_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_context_window_exceeded"})
# The error of a reply cut at the output limit: the retry hint and the error note say it, and ask for less.
CUT_REPLY_TEMPLATE = (
    "it was cut off by the output limit{after}, unfinished, so none of it was used; write a shorter reply: one "
    "decision, with a sentence or two of reasoning at most"
)
# A cut reply is quoted back this far: its start shows the model what it was writing; more of a runaway would
# only lengthen the retry's prompt.
CUT_REPLY_QUOTED_CHARS = 300

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class DecisionProtocol(ABC):
    """How a model states its decisions. Subclass it to support another reply format."""

    name: ClassVar[str]
    # What a correct reply looks like, for the correction hint after an unparsable reply.
    expected_format: ClassVar[str]

    @abstractmethod
    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        """The runnable `decide` calls with the prompt messages."""

    @abstractmethod
    def instructions(self, registry: ToolRegistry) -> str:
        """Text appended to the system prompt (empty when the model API carries the tools)."""

    @abstractmethod
    def render(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The stored window as this protocol shows it to the model."""

    @abstractmethod
    def parse(self, reply: BaseMessage, registry: ToolRegistry) -> tuple[Decision, AIMessage | None]:
        """The decision in `reply`, and the message to store in the window (None when unparsable). decide
        never passes a reply that an output limit cut (`read_reply`)."""

    def finalize(self, prompt: list[BaseMessage]) -> list[BaseMessage]:
        """The assembled prompt in the shape this protocol sends it (by default, as it is)."""
        return prompt

    def format_answer(self, answer: str, thought: str = "") -> str:
        """A final answer as the model writes it (by default, the answer alone): how a final answer of an
        earlier run on the thread is shown back, and how worked examples write one."""
        return answer

    def tool_schemas(self, registry: ToolRegistry) -> list[dict[str, Any]]:
        """The tool schemas `bind` sends beside the messages, counted in every prompt's tokens. By default
        none: override it when `bind` gives the model API the tools (a text protocol describes them in
        `instructions`, which are counted with the system prompt)."""
        return []


def read_reply(
    protocol: DecisionProtocol, reply: BaseMessage, registry: ToolRegistry
) -> tuple[Decision, AIMessage | None]:
    """The decision in `reply` as `protocol` reads it, unless an output limit cut the reply (`cut_off`): then it
    is unparsable whatever it holds, since a call in it that looks complete may have lost the rest of its
    arguments, and the retry asks for a shorter reply."""
    if cut_off(reply) is None:
        return protocol.parse(reply, registry)
    reported = (getattr(reply, "usage_metadata", None) or {}).get("output_tokens")
    after = f" at {reported} tokens" if isinstance(reported, int) and reported > 0 else ""
    return unparsable(_written(reply), CUT_REPLY_TEMPLATE.format(after=after)), None


def cut_off(reply: BaseMessage) -> str | None:
    """Why an output limit cut `reply`, as its provider reports it in lower case ("length", "max_tokens"), or
    None when the reply ended on its own or says nothing about how it ended."""
    metadata = reply.response_metadata or {}
    reasons = [metadata.get(key) for key in STOP_REASON_KEYS]
    if isinstance(details := metadata.get("incomplete_details"), dict):
        reasons.append(details.get("reason"))
    # Google's is an enum member (FinishReason.MAX_TOKENS), the others strings.
    names = (str(getattr(reason, "name", reason)).rsplit(".", 1)[-1].lower() for reason in reasons if reason)
    return next((name for name in names if name in CUT_STOP_REASONS), None)


def _written(reply: BaseMessage) -> str:
    """The start of what a cut reply holds, its text then its calls, cut to CUT_REPLY_QUOTED_CHARS."""
    parts: list[str] = [reply.text]
    for call in [*getattr(reply, "tool_calls", []), *getattr(reply, "invalid_tool_calls", [])]:
        args = call.get("args")
        try:
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
        except (RecursionError, ValueError):  # nested too deeply to write
            args = "…"
        parts.append(f"{call.get('name')}({truncate(args, CUT_REPLY_QUOTED_CHARS)})")
    return truncate("\n".join(part for part in parts if part), CUT_REPLY_QUOTED_CHARS)


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


def _json_text(value: Any) -> str:
    """`value` (read from a reply) as JSON text; nesting too deep to write is invalid JSON, not a crash."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        raise ValueError(NESTED_TOO_DEEPLY) from None


def _usable_call_id(call_id: object) -> TypeIs[str]:
    return isinstance(call_id, str) and 0 < len(call_id) <= MAX_CALL_ID_CHARS and clean_text(call_id) == call_id


def _name_problem(name: str) -> str | None:
    if len(name) <= MAX_TOOL_NAME_CHARS:
        return None
    return f"a tool name of {len(name)} characters; name one of the tools exactly, as listed"


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


# The text protocols (react, call_tool) --------------------------------------------------------------------

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


def _resolve_name(name: str, registry: ToolRegistry) -> str:
    """The registered tool `name` means: itself, or the one tool whose name differs from it only in case
    (seed 002's tools are `Calculator`, `Weather`)."""
    if name in registry:
        return name
    matches = [known for known in registry.names if known.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else name


# The protocols `AgentConfig.protocol` names. A new one is a class here and a name in `ProtocolName`; the
# CLI's --protocol choices follow.
PROTOCOLS: dict[ProtocolName, type[DecisionProtocol]] = {
    "tool_calling": ToolCallingProtocol,
    "json": JsonProtocol,
    "react": ReactProtocol,
    "call_tool": CallToolProtocol,
}

PROTOCOL_MISMATCH_TEMPLATE = (
    "the protocol object {custom!r} is named {name!r}, but the config names protocol={configured!r}: "
    "leave AgentConfig.protocol unset to use the object, or pass an object whose name is {configured!r}"
)


def get_protocol(choice: AgentConfig | ProtocolName, custom: DecisionProtocol | None = None) -> DecisionProtocol:
    """The protocol an agent uses: `custom` when given, else a new instance of the class `PROTOCOLS`
    registers under the name (`choice`, or `choice.protocol` for a config).

    A custom protocol must agree with a name set explicitly: with a name, or a config whose `protocol` was
    given, its `name` must be that name, else `ConfigurationError`. A config that leaves `protocol` at its
    default accepts any protocol object (e.g. one with a new name).
    """
    if isinstance(choice, AgentConfig):
        name, named = choice.protocol, "protocol" in choice.model_fields_set
    else:
        name, named = choice, True
    if custom is None:
        if name not in PROTOCOLS:
            raise ConfigurationError(f"unknown protocol {name!r}; use one of {list(PROTOCOLS)}")
        return PROTOCOLS[name]()
    if not isinstance(custom, DecisionProtocol):
        raise ConfigurationError(
            f"protocol must be a DecisionProtocol instance, got {custom!r}; e.g. protocol=JsonProtocol()"
        )
    custom_name = getattr(custom, "name", None)
    if named and custom_name != name:
        raise ConfigurationError(
            PROTOCOL_MISMATCH_TEMPLATE.format(custom=type(custom).__name__, name=custom_name, configured=name)
        )
    return custom


def _check_registry() -> None:
    # A developer error in this module, caught at import rather than as a KeyError when an agent is built.
    names = get_args(ProtocolName)
    if sorted(PROTOCOLS) != sorted(names) or any(cls.name != key for key, cls in PROTOCOLS.items()):
        raise ConfigurationError(
            f"PROTOCOLS must register one class per ProtocolName {list(names)} under its own name, got "
            f"{ {key: cls.name for key, cls in PROTOCOLS.items()} }"
        )


_check_registry()
