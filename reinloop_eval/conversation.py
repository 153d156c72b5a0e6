"""How the simulated model reads its prompt and writes its replies: the prompt read back in the normal form
(`read_back`), what it finds there (the outcome of its last action, its progress through the plan, whether
the agent read a call written as text, whether the feedback names its mistake: `names_the_mistake`), and its
replies (a call, the same action again, call ids drawn from the seed, a reply in a text protocol's format:
`written`)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, InvalidToolCall, ToolMessage
from langchain_core.messages.tool import ToolCall

from reinloop.protocols import OBSERVATION_LABEL, DecisionProtocol, WrittenProtocol
from reinloop.protocols.interface import new_call_id
from reinloop.tools.registry import ToolRegistry
from reinloop_eval.tasks import EvalTask, Step

__all__ = ["Action", "feedback", "names_the_mistake", "read_back", "written"]

# What the model did at a decision that called a tool: a call, or a malformed (invalid) one.
Action = ToolCall | InvalidToolCall

# The words that name an argument's expected type, by the type of the value the plan gives it: JSON Schema's
# name and Python's, as validators and signatures write them.
TYPE_WORDS = {
    str: ("string", "str"), int: ("integer", "int"), float: ("number", "float"), bool: ("boolean", "bool"),
    list: ("array", "list"), dict: ("object", "dict"),
}  # fmt: skip
# What names a malformed call's mistake: the format its arguments must have.
MALFORMED_WORDS = ("json",)


def read_back(protocol: DecisionProtocol, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """A prompt rendered by a text-writing `protocol`, in the normal form: each decision as the protocol reads
    it, each `Observation:` turn as a `ToolMessage` answering the next unanswered call before it."""
    registry = ToolRegistry()  # names are kept as written; the arguments are JSON, so no schema is needed
    normal: list[BaseMessage] = []
    waiting: list[str] = []  # ids of the calls of the last decision still without a result
    for message in messages:
        if isinstance(message, AIMessage):
            _, stored = protocol.parse(message, registry)
            normal.append(stored or AIMessage(message.text))
            waiting = [call["id"] or "" for call in stored.tool_calls] if stored else []
        elif isinstance(message, HumanMessage) and message.text.startswith(OBSERVATION_LABEL) and waiting:
            normal.append(ToolMessage(message.text.removeprefix(OBSERVATION_LABEL), tool_call_id=waiting.pop(0)))
        else:
            normal.append(message)
    return normal


def written(protocol: WrittenProtocol, reply: AIMessage) -> AIMessage:
    """`reply` (native tool calls, a malformed call or an answer) as a model using a text-writing `protocol`
    writes it: a malformed call is the call in that format with the same unterminated arguments."""
    if reply.invalid_tool_calls:
        bad = reply.invalid_tool_calls[0]
        template = protocol.format_decision("", [{"name": bad["name"] or "", "args": {}}])
        cut = template.rindex("{}")  # where the (empty) arguments go
        return AIMessage(template[:cut] + (bad["args"] or ""))
    if not reply.tool_calls:
        return AIMessage(protocol.format_answer(reply.text))
    return AIMessage(protocol.format_decision(reply.text, reply.tool_calls))


def _was_read(call: ToolCall | None, previous: Action | None) -> bool:
    """Whether the agent read the plain-text call `call`: the last call its prompt shows is that call."""
    if call is None or previous is None or _malformed(previous):
        return False
    return previous["name"] == call["name"] and previous["args"] == call["args"]


def _with_ids(reply: AIMessage, seed: int, index: int) -> AIMessage:
    """`reply` with call ids drawn from (seed, decision index), in `new_call_id`'s form: an agent may write an
    id into what it sends next (create_agent's note on a malformed call does), so a random id would make the
    tokens of a rerun differ."""
    rng = random.Random(f"{seed}/ids/{index}")

    def fresh() -> str:
        return f"call_{rng.getrandbits(96):024x}"

    calls = [{**call, "id": fresh()} for call in reply.tool_calls]
    invalid = [{**call, "id": fresh()} for call in reply.invalid_tool_calls]
    return reply.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": dict(args), "id": new_call_id(), "type": "tool_call"}])


def _failed(message: ToolMessage) -> bool:
    text = message.text.strip()
    return message.status == "error" or not text or text.startswith("Error") or text in ("[]", "{}", "None")


def _observed(messages: Sequence[BaseMessage], previous: Action | None) -> tuple[Action | None, ToolCall | None]:
    """The outcome of the model's last action `previous` (see `_last_call`), as (action, None) if it failed,
    (None, call) if it succeeded, (None, None) if it is not known (no action yet, or not answered).

    A malformed call failed, whatever answered it. A call's outcome is its observation, the last tool message
    after it. Notes an agent adds (a correction hint, a reflection turn, a refusal), as a human, system or AI
    message without calls, neither hide nor change that outcome: the model reacts the same whatever kind of
    message the agent writes them in.
    """
    if previous is None:
        return None, None
    if _malformed(previous):
        return previous, None
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            return (previous, None) if _failed(message) else (None, previous)  # type: ignore[return-value]
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            return None, None  # its last call was not answered
    return None, None


def _progress(task: EvalTask, messages: Sequence[BaseMessage], wrong: dict[int, dict[str, Any]] | None = None) -> int:
    """Plan steps done: successful observations of the plan's tools, in order; a step done with the wrong
    arguments `wrong` holds for it counts as done (the model does not know)."""
    names = {}
    for message in messages:
        if isinstance(message, AIMessage):
            names.update({call["id"]: call for call in message.tool_calls})
    progress = 0
    for message in messages:
        if progress >= len(task.plan) or not isinstance(message, ToolMessage) or _failed(message):
            continue
        call = names.get(message.tool_call_id)
        step = task.plan[progress]
        if call is not None and call["name"] == step.tool and call["args"] in (step.args, (wrong or {}).get(progress)):
            progress += 1
    return progress


def _last_call(messages: Sequence[BaseMessage]) -> Action | None:
    """The model's last action the messages show: the last call of the last reply that made one, a malformed
    (invalid) call included."""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            return message.tool_calls[-1] if message.tool_calls else message.invalid_tool_calls[-1]
    return None


def _malformed(action: Action) -> bool:
    return action.get("type") == "invalid_tool_call"


def _again(action: Action) -> AIMessage:
    """The same action again: the same call, or the same malformed one."""
    if _malformed(action):
        return AIMessage("", invalid_tool_calls=[{**action, "id": new_call_id()}])
    return _call(action["name"] or "", action["args"])  # type: ignore[arg-type]


def feedback(messages: Sequence[BaseMessage]) -> str:
    """What the agent answered the model's last action with: the text of the messages after the last reply that
    called a tool (results and notes of any kind, an AI message without calls included), or, before any, after
    the task's message (the agent's instructions before it are not feedback)."""
    start = next((i + 1 for i, m in enumerate(messages) if isinstance(m, HumanMessage)), 0)
    for index in range(len(messages) - 1, start - 1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            start = index + 1
            break
    return "\n".join(message.text for message in messages[start:])


def names_the_mistake(failed: Action, step: Step | None, text: str) -> bool | None:
    """Whether `text` (the feedback) names what was wrong with the failed action `failed`, meant as the plan's
    `step`: for a malformed call, the arguments' format (JSON); for an unknown tool, the right one among the
    allowed values; for a missing argument, the field; for a mistyped one, its expected type. None: nothing
    of it was the model's to fix (the plan's own call, which a tool fault failed) or no step to compare with."""
    if _malformed(failed):
        return _mentions(text, MALFORMED_WORDS)
    if step is None:
        return None
    if failed["name"] != step.tool:
        return _mentions(text, (step.tool,))
    args = failed["args"] if isinstance(failed["args"], dict) else {}
    missing = [key for key in step.args if key not in args]
    if missing:
        return _mentions(text, missing)
    mistyped = [key for key, value in step.args.items() if type(args[key]) is not type(value)]
    if mistyped:
        return any(_mentions(text, TYPE_WORDS.get(type(step.args[key]), ())) for key in mistyped)
    return None


def _mentions(text: str, words: Sequence[str]) -> bool:
    """Whether `text` holds one of `words` as a word of its own (`calculator_tool` does not hold `calculator`)."""
    return any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text, re.IGNORECASE) for word in words)
