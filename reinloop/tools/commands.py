"""Tools that return a LangGraph `Command(update=...)`: what of the update reinloop applies, and the observation.

A tool may write two things and nothing else: its own answer, ``update["messages"]`` holding exactly one
`ToolMessage` for its call id, whose content is the call's observation (judged and cut like any result; the
message itself is not added: reinloop writes the window); and keys of the agent's own `state_schema` that
`AgentState` does not have, with values a checkpointer can store. Any other Command is refused as a whole,
with a `tool_error` observation saying why: an error, not an exception, since the tool has already run and
raising would leave the call unanswered, to be re-run on resume and raise again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import ToolMessage, convert_to_messages
from langgraph.types import Command

from reinloop.storable import clean_value, storage_problem
from reinloop.tools.execution import ToolRun
from reinloop.tools.results import ResultCheck, UnshowableResultError, describe_error, result_text

__all__ = ["ANSWER_KEY", "COMMAND_REFUSED_TEMPLATE", "settle_command"]

# The update key whose ToolMessage answers the call.
ANSWER_KEY = "messages"
COMMAND_REFUSED_TEMPLATE = "it returned a Command that reinloop refuses, {problem}; nothing of it was applied"


def settle_command(
    command: Command[Any], call_id: str, writable: frozenset[str], check: ResultCheck
) -> tuple[ToolRun, dict[str, Any]]:
    """The call's observation from `command`, and the state update to apply with it (empty when refused).

    `writable` are the state keys a tool may write; `check` is the tool's result check, given the answer.
    """
    update, problem = _update(command, call_id, writable)
    if problem is not None:
        return ToolRun("tool_error", COMMAND_REFUSED_TEMPLATE.format(problem=problem)), {}
    answer = update.pop(ANSWER_KEY)
    return _judge(answer, check), {key: clean_value(value) for key, value in update.items()}


def _update(command: Command[Any], call_id: str, writable: frozenset[str]) -> tuple[dict[str, Any], str | None]:
    """The Command's update as a dict, or why it is refused."""
    if command.goto or command.graph is not None or command.resume is not None:
        return {}, "because a tool cannot steer reinloop's graph (goto, graph, resume): return an update only"
    raw = command.update
    pairs = isinstance(raw, list | tuple) and all(isinstance(pair, tuple) and len(pair) == 2 for pair in raw)
    if not (isinstance(raw, Mapping) or pairs):
        return {}, f"because its update is a {type(raw).__name__}, not a dict of state keys"
    update: dict[str, Any] = dict(raw or {})
    allowed = ", ".join(sorted(writable)) or "none"
    for key, value in update.items():
        if key == ANSWER_KEY:
            continue
        if key not in writable:
            return {}, f"because it writes {key!r}, which tools may not write (keys of your own: {allowed})"
        if problem := storage_problem(value):
            return {}, f"because the value of {key!r} cannot be saved: {problem}"
    answer = _answer(update.get(ANSWER_KEY, []), call_id)
    if answer is None:
        return {}, (
            f"because update[{ANSWER_KEY!r}] must hold exactly one message, a ToolMessage with "
            f"tool_call_id={call_id!r} (the call's answer)"
        )
    update[ANSWER_KEY] = answer
    return update, None


def _answer(messages: Any, call_id: str) -> ToolMessage | None:
    """The one ToolMessage answering the call, when `messages` is that and nothing else."""
    try:
        found = convert_to_messages(messages if isinstance(messages, list | tuple) else [messages])
    except Exception:  # not messages at all
        return None
    if len(found) == 1 and isinstance(found[0], ToolMessage) and found[0].tool_call_id == call_id:
        return found[0]
    return None


def _judge(answer: ToolMessage, check: ResultCheck) -> ToolRun:
    """The answer as `_settle` judges a result: the check, then its text; nothing it raises escapes."""
    try:
        if reason := check(answer):
            return ToolRun("empty_result", reason)
        return ToolRun(None, result_text(answer))
    except UnshowableResultError as exc:
        return ToolRun("tool_error", str(exc))
    except Exception as exc:
        return ToolRun("tool_error", describe_error(exc))
