"""Approvals: a person approves, edits or rejects a tool call before it runs.

A tool needs approval when `build_agent(..., approve=[names])` names it or it says so itself
(`approval_tools`). validate_args interrupts once for each such call that is ready to run, in the order the
model requested them, with an `ApprovalRequest` as the value; no call of the decision runs before all are
answered. An answer (ours, or a `HumanInTheLoopMiddleware` decision) is read by the interrupt's
`response_schema` (`answer_schema`): one that is not valid raises `pydantic.ValidationError` before anything
is saved, and the same interrupt waits to be answered again. A person's mistake is theirs to fix: it never
becomes an error observation the model would take for its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final, Literal, get_args

from langchain_core.messages import AIMessage, AnyMessage
from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from typing_extensions import TypedDict

from reinloop.errors import ConfigurationError
from reinloop.state import CallCheck
from reinloop.storable import args_problem, clean_text
from reinloop.tools.registry import RegisteredTool, ToolRegistry

__all__ = [
    "ANSWER_ERROR_TEMPLATE",
    "APPROVAL_REQUEST_TYPE",
    "EDITED_NOTE",
    "NO_REASON",
    "REJECTED_TEMPLATE",
    "ApprovalAnswer",
    "ApprovalRequest",
    "InvalidAnswerError",
    "ReviewAction",
    "answer_schema",
    "approval_request",
    "approval_tools",
    "read_answer",
    "thought_of",
]

ReviewAction = Literal["approve", "edit", "reject"]
REVIEW_ACTIONS: tuple[ReviewAction, ...] = get_args(ReviewAction)
# The interrupt value's `type`, as LangChain's per-call mode names it: how a client tells approvals apart
# from other interrupts (a tool's own).
APPROVAL_REQUEST_TYPE: Final = "tool_approval"

DESCRIPTION_TEMPLATE = "Tool execution requires approval\n\nTool: {name}\nArgs: {args}"
THOUGHT_LINE = "\nThought: {thought}"

# What the model is told in place of a rejected call's result, and before an edited call's result.
REJECTED_TEMPLATE = (
    "Error: not run: the user rejected this {name!r} call: {reason}. Do not call it again as it was: change it "
    "as the user says, use another tool, or answer."
)
NO_REASON = "no reason given"
EDITED_NOTE = "Note: the user changed this call before it ran; it ran with the arguments {args}.\n"

ANSWER_ERROR_TEMPLATE = (
    "invalid answer to the approval of the {name!r} call: {problem}. Answer with "
    '{{"action": "approve"}}, {{"action": "edit", "args": {{...}}}} or {{"action": "reject", "reason": "..."}}'
)


class ApprovalRequest(TypedDict):
    """What the run is waiting for: the value of an approval's interrupt."""

    type: Literal["tool_approval"]
    tool_call_id: str
    name: str  # the tool
    args: dict[str, Any]  # the arguments as the model sent them
    thought: str  # the model's reasoning beside its calls ("" when it gave none)
    description: str  # the call and the thought as text, for a person to read
    allowed_decisions: list[ReviewAction]


class ApprovalAnswer(BaseModel):
    """An answer, read: what the person decided about the call. `answer_schema` makes the class that reads
    the answers about one tool's calls."""

    model_config = ConfigDict(frozen=True)

    tool: ClassVar[RegisteredTool | None] = None  # the tool whose call is reviewed (`answer_schema`)
    action: ReviewAction
    args: dict[str, Any] | None = None  # an edit's arguments, valid under the tool's schema, as given
    canonical: dict[str, Any] | None = None  # the same, as the schema reads them (for the call's signature)
    reason: str | None = None  # a rejection's reason, None when none was given

    @model_validator(mode="before")
    @classmethod
    def _read(cls, value: Any) -> Any:
        if cls.tool is None:
            raise TypeError("read answers with answer_schema(tool), not ApprovalAnswer itself")
        return read_answer(cls.tool, value)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(core_schema) if cls.tool is None else _json_schema(cls.tool)


def approval_tools(registry: ToolRegistry, approve: Iterable[str] | None, has_checkpointer: bool) -> frozenset[str]:
    """The tools whose calls wait for approval: those named in `approve`, and those that declare it. An
    unknown name, or approvals without a checkpointer (an interrupt is a saved stop), raise `ConfigurationError`."""
    if isinstance(approve, str):
        raise ConfigurationError(
            f"approve must be a list of tool names, got the string {approve!r}: approve=[{approve!r}]"
        )
    named = frozenset(approve or ())
    if unknown := sorted(named - set(registry.names)):
        raise ConfigurationError(
            f"approve names tools the agent does not have: {', '.join(map(repr, unknown))}; its tools are "
            f"[{', '.join(registry.names)}]"
        )
    tools = named | {entry.name for entry in registry if entry.approve}
    if tools and not has_checkpointer:
        raise ConfigurationError(
            f"calls of {', '.join(map(repr, sorted(tools)))} wait for a person's approval, which stops the run "
            "with a LangGraph interrupt that is saved until answered: give build_agent a checkpointer "
            "(reinloop.sqlite_checkpointer(path), or InMemorySaver() in tests), or checkpointer=True where one is "
            "given at run time (LangGraph Server, a parent graph)"
        )
    return tools


def approval_request(check: CallCheck, thought: str) -> ApprovalRequest:
    args = json.dumps(check["args"], ensure_ascii=False)
    description = DESCRIPTION_TEMPLATE.format(name=check["name"], args=args)
    if thought:
        description += THOUGHT_LINE.format(thought=thought)
    return ApprovalRequest(
        type=APPROVAL_REQUEST_TYPE,
        tool_call_id=check["call_id"],
        name=check["name"],
        args=check["args"],
        thought=thought,
        description=description,
        allowed_decisions=list(REVIEW_ACTIONS),
    )


def thought_of(messages: list[AnyMessage], call_id: str) -> str:
    """The text beside the model's call `call_id`: its reasoning (the json protocol's "thought")."""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and any(call.get("id") == call_id for call in message.tool_calls):
            return message.text
    return ""


def answer_schema(entry: RegisteredTool) -> type[ApprovalAnswer]:
    """The `response_schema` of the interrupt for a call of `entry`: LangGraph reads each answer with it
    (`read_answer`) before saving it, and shows clients its JSON schema (reinloop's forms, an edit's arguments
    as the tool's)."""
    return type("ApprovalAnswer", (ApprovalAnswer,), {"tool": entry, "__module__": __name__})


class InvalidAnswerError(ValueError):
    """An answer that is not one of the forms above, or an edit with invalid arguments. Raised while LangGraph
    reads the answer, which reports it inside a `pydantic.ValidationError` (its ``errors()[0]["ctx"]["error"]``)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(ANSWER_ERROR_TEMPLATE.format(name=name, problem=problem))
        self.problem = problem  # what is wrong, without the list of valid forms


def read_answer(entry: RegisteredTool, value: Any) -> dict[str, Any]:
    """`value` as the fields of an `ApprovalAnswer` about a call of `entry`; `InvalidAnswerError` saying what
    is wrong with it."""
    try:
        return _read(entry, value)
    except ValueError as exc:
        raise InvalidAnswerError(entry.name, str(exc)) from None


# The keys each answer may have besides the one naming its action, and what each is read as: reinloop's
# form names it with "action", LangChain's HITL decisions with "type".
_FORMS: dict[str, dict[str, dict[str, str]]] = {
    "action": {"approve": {}, "edit": {"args": "args"}, "reject": {"reason": "reason"}},
    "type": {"approve": {}, "edit": {"edited_action": "edited_action"}, "reject": {"message": "reason"}},
}


def _read(entry: RegisteredTool, value: Any) -> dict[str, Any]:
    value = _one_decision(value)
    if problem := args_problem(value):
        raise ValueError(f"it holds {problem}")
    action, fields = _fields(value)
    if action == "approve":
        return {"action": action}
    if action == "reject":
        return {"action": action, "reason": _reason(fields.get("reason"))}
    args = _edited_args(entry, fields)
    problems, canonical = entry.validate(args)
    if problems:
        raise ValueError(f"the edited arguments are invalid: {'; '.join(problems)}; expected {entry.signature}")
    return {"action": action, "args": args, "canonical": canonical}


def _one_decision(value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping) and set(value) == {"decisions"}:  # LangChain's HITLResponse
        decisions = value["decisions"]
        if not isinstance(decisions, list) or len(decisions) != 1:
            raise ValueError('"decisions" must hold exactly one decision: each call is approved on its own')
        value = decisions[0]
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, got {type(value).__name__} {value!r:.80}")
    return value


def _fields(value: Mapping[str, Any]) -> tuple[ReviewAction, dict[str, Any]]:
    """The answer's action and its other fields, by the names `_FORMS` reads them as."""
    named_by = next((key for key in _FORMS if key in value), None)
    if named_by is None:
        raise ValueError(f'it has no "action" (got the keys {sorted(map(str, value))})')
    action = value[named_by]
    if action == "respond":
        raise ValueError('"respond" is not supported: reject the call with your answer as the reason')
    forms = _FORMS[named_by]
    if action not in forms:
        raise ValueError(f"{named_by} must be one of {', '.join(map(repr, forms))}, got {action!r:.80}")
    keys = forms[action]
    if unexpected := set(value) - {named_by, *keys}:
        takes = f"takes only {', '.join(map(repr, keys))}" if keys else "takes no other keys"
        raise ValueError(f"{named_by}={action!r} {takes}, got {sorted(map(str, unexpected))}")
    return action, {keys[key]: value[key] for key in keys if key in value}


def _edited_args(entry: RegisteredTool, fields: dict[str, Any]) -> Any:
    if "edited_action" not in fields:
        if "args" not in fields:
            raise ValueError('an edit needs "args": the arguments to run the call with')
        return fields["args"]
    edited = fields["edited_action"]
    if not isinstance(edited, Mapping) or "args" not in edited:
        raise ValueError('"edited_action" must be {"name": <the tool>, "args": {...}}')
    if edited.get("name", entry.name) != entry.name:
        raise ValueError(f"an edit cannot call another tool ({edited['name']!r:.80} instead of {entry.name!r})")
    return edited["args"]


def _reason(reason: Any) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ValueError(f"the reason must be text, got {type(reason).__name__}")
    return clean_text(reason).strip() or None


def _json_schema(entry: RegisteredTool) -> dict[str, Any]:
    """reinloop's answer forms as JSON schema, an edit's arguments as the tool's (for clients' forms)."""
    args = dict(entry.schema_json) or {"type": "object"}
    defs = args.pop("$defs", None)

    def form(action: str, **properties: Any) -> dict[str, Any]:
        required = ["action", *(["args"] if "args" in properties else [])]
        return {
            "type": "object",
            "properties": {"action": {"const": action}, **properties},
            "required": required,
            "additionalProperties": False,
        }

    schema: dict[str, Any] = {
        "title": "ApprovalAnswer",
        "oneOf": [form("approve"), form("edit", args=args), form("reject", reason={"type": "string"})],
    }
    if defs:
        schema["$defs"] = defs
    return schema
