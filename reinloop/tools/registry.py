"""The tools an agent may call, by name, with their schemas, time limits, result checks and run policy."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ValidationError

from reinloop.errors import ConfigurationError
from reinloop.text import truncate
from reinloop.tools.execution import ISOLATIONS, Isolation, ResultRules, RetryOn, wait_problem
from reinloop.tools.injection import NO_INJECTION, Injection, injection_of
from reinloop.tools.results import ResultCheck, reject_empty

if TYPE_CHECKING:
    from reinloop.tools.json_schema import JsonArgsValidator

__all__ = ["POLICY_KEY", "RESERVED_TOOL_NAMES", "RegisteredTool", "ToolRegistry", "as_tool"]

# Names the decision protocols use for themselves (the json protocol's final answer action).
RESERVED_TOOL_NAMES = frozenset({"final_answer"})

# A tool declares its own run policy in its LangChain metadata, `{"reinloop": {"isolation": "process"}}`;
# the arguments of `ToolRegistry.add` override it. The policy's keys and their defaults (`retryable` None:
# as declared, `_declared_retryable`):
POLICY_KEY = "reinloop"
_POLICY_DEFAULTS: dict[str, Any] = {
    "isolation": "thread",
    "idempotent": True,
    "retryable": None,
    "cacheable": True,
    "approve": False,
}
# The MCP tool annotations that make a tool safe to repeat, which langchain-mcp-adapters copies to the top
# level of its tool's metadata (and `MCPTool` keeps).
_MCP_REPEAT_HINTS = ("readOnlyHint", "idempotentHint")
# The policy keys whose values are True or False (once `retryable`'s default is filled in).
_FLAGS = ("idempotent", "retryable", "cacheable", "approve")


def as_tool(obj: BaseTool | Callable[..., Any]) -> BaseTool:
    """A LangChain tool as is, or a plain typed callable made into one (its docstring is the description)."""
    if isinstance(obj, BaseTool):
        return obj
    if not callable(obj):
        raise ConfigurationError(f"tools must be LangChain tools or typed callables, got {obj!r}")
    try:
        return StructuredTool.from_function(obj)
    except ValueError as exc:
        name = getattr(obj, "__name__", repr(obj))
        raise ConfigurationError(
            f"cannot make a tool of {name!r}: {exc} Give it a docstring (the model reads it) "
            f"or wrap it with langchain_core.tools.tool(description=...)."
        ) from None


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A tool with what reinloop needs to call it safely."""

    tool: BaseTool
    check_result: ResultCheck
    timeout_s: float | None  # None: the agent's tool_timeout_s
    schema: type[BaseModel] | None  # the arguments the model controls; None when the tool has no pydantic schema
    schema_json: dict[str, Any]  # the same as JSON schema, shown to the model
    extra_args: bool  # whether the tool's own schema accepts arguments it does not declare
    isolation: Isolation  # where a call runs: a thread of this process, or a worker process killed at the deadline
    idempotent: bool  # whether running the same call twice has no further effect (safe to run again)
    retryable: bool  # whether a call that raised or timed out is run again in place (AgentConfig.tool_attempts)
    # whether an identical call soon after a success may be answered with that result instead of running:
    # False for a tool whose result changes with time or with other calls' effects (a clock, a file read)
    cacheable: bool
    # checks the arguments of a tool described only by a JSON schema (`schema` None), built once by `add`
    json_validator: JsonArgsValidator | None = None
    # the arguments the tool takes besides the model's (ToolRuntime, InjectedState, ...), filled in at the call
    injection: Injection = NO_INJECTION
    # whether each call waits for a person to approve, edit or reject it before it runs (`reinloop.approvals`)
    approve: bool = False
    # how a call's outcome is judged: empty, an error, worth another attempt (`check_result` is its check)
    rules: ResultRules = field(default_factory=ResultRules)
    # the tool as it runs, when not `tool` itself: a copy with LangChain's handle_tool_error off, so that a
    # ToolException reaches reinloop's error accounting (`rules` words it as the tool's handler does)
    run_as: BaseTool | None = None

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def runner(self) -> BaseTool:
        """The tool to invoke for a call."""
        return self.run_as or self.tool

    @property
    def signature(self) -> str:
        """The call's shape in one short line, e.g. ``web_search(query: string, max_results?: integer)``: what
        an error observation shows (the full schema, with descriptions, is already beside every prompt)."""
        properties = self.schema_json.get("properties", {})
        required = set(self.schema_json.get("required", []))
        args = (f"{arg}{'' if arg in required else '?'}: {_type_text(spec)}" for arg, spec in properties.items())
        return f"{self.name}({', '.join(args)})"

    def validate(self, args: Any) -> tuple[list[str], dict[str, Any]]:
        """Problems with `args` under the tool's schema (empty when valid), and the canonical arguments: the
        one validation of a call's arguments, the model's (validate_args) and a person's edit (approvals)."""
        if not isinstance(args, dict):
            return [f"the arguments must be a JSON object, got {type(args).__name__}"], {}
        schema = self.schema
        if schema is None:
            # A tool described only by a JSON schema (every MCP tool): its own invoke does not check the
            # arguments, and they stay as the model wrote them.
            problems = self.json_validator.problems(args) if self.json_validator else []
            return (problems, {}) if problems else ([], args)
        problems = []
        if not self.extra_args:
            # pydantic ignores unknown keys by default, which would hide a misspelled optional argument.
            known = set(schema.model_fields) | {info.alias for info in schema.model_fields.values() if info.alias}
            problems = [
                f"{key}: unexpected argument (expected one of {sorted(schema.model_fields)})"
                for key in args
                if key not in known
            ]
        try:
            validated = schema.model_validate(args)
        except ValidationError as exc:
            problems += [_describe(error) for error in exc.errors(include_url=False)]
        if problems:
            return problems, {}
        return [], validated.model_dump(mode="json")


def _describe(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{field}: missing (required)"
    return f"{field}: {error['msg']} (got {truncate(repr(error['input']), 80)})"


def _type_text(spec: Any) -> str:
    """A JSON schema's type in a few characters: ``string``, ``"a"|"b"``, ``list[integer]``, ``Item``."""
    if not isinstance(spec, dict):
        return "any"
    if "enum" in spec:
        return "|".join(json.dumps(value, ensure_ascii=False) for value in spec["enum"])
    if "anyOf" in spec:
        return "|".join(_type_text(option) for option in spec["anyOf"])
    if "$ref" in spec:
        return str(spec["$ref"]).rpartition("/")[2]
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list[{_type_text(spec.get('items'))}]"
    return "|".join(kind) if isinstance(kind, list) else str(kind)


def _call_schema(tool: BaseTool) -> tuple[type[BaseModel] | None, dict[str, Any]]:
    # tool_call_schema leaves out injected arguments (InjectedToolArg, InjectedState, ...), which the model
    # neither sees nor controls.
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema, schema.model_json_schema()
    return None, dict(schema) if isinstance(schema, dict) else {}


def _policy(tool: BaseTool, defaults: dict[str, Any], **given: Any) -> dict[str, Any]:
    """The tool's run policy: the defaults (updated by `defaults`), then what the tool declares in its
    metadata, then `given`."""
    declared = (tool.metadata or {}).get(POLICY_KEY, {})
    if not isinstance(declared, dict) or set(declared) - set(_POLICY_DEFAULTS):
        raise ConfigurationError(
            f"tool {tool.name!r} declares metadata[{POLICY_KEY!r}] = {declared!r}; it must be a dict with "
            f"the keys {', '.join(map(repr, _POLICY_DEFAULTS))}"
        )
    named = {key: value for key, value in given.items() if value is not None}
    policy = {**_POLICY_DEFAULTS, **defaults, **declared, **named}
    if policy["isolation"] not in ISOLATIONS:
        raise ConfigurationError(
            f"isolation for tool {tool.name!r} must be one of {', '.join(map(repr, ISOLATIONS))}, "
            f"got {policy['isolation']!r}"
        )
    if policy["retryable"] is None:
        policy["retryable"] = _declared_retryable(tool, {**declared, **named})
    for flag in _FLAGS:
        if not isinstance(policy[flag], bool):
            raise ConfigurationError(f"{flag} for tool {tool.name!r} must be True or False, got {policy[flag]!r}")
    return policy


def _declared_retryable(tool: BaseTool, declared: dict[str, Any]) -> Any:
    """Whether a tool that says nothing of `retryable` may be retried in place: only when it is declared safe
    to repeat, by an explicit `idempotent` (in its metadata or given to `add`) or an MCP annotation."""
    # A call that raised or timed out may have had its effect (a timeout says nothing of what the tool did):
    # running it again could make it twice. `idempotent`'s default (True) decides only whether a call in
    # flight at a crash runs again, with its idempotency key; it declares nothing.
    if "idempotent" in declared:
        return declared["idempotent"]
    metadata = tool.metadata or {}
    return any(metadata.get(hint) is True for hint in _MCP_REPEAT_HINTS)


def _check_timeout(name: str, timeout_s: float | None) -> None:
    # Checked here, not at the first call, whose wait would raise OverflowError out of the run.
    if timeout_s is None:
        return
    problem = "must be positive" if timeout_s <= 0 else wait_problem(timeout_s)
    if problem:
        raise ConfigurationError(f"timeout_s for tool {name!r} {problem}, got {timeout_s!r}")


def _require_in_process(tool: BaseTool, injection: Injection) -> None:
    # The state, the store and the runtime (its stream writer, callbacks) live in the agent's process and
    # cannot be pickled to a worker; the call id could, but a worker returns only text.
    if injection.needed:
        args = ", ".join(sorted(injection.keys))
        raise ConfigurationError(
            f"tool {tool.name!r} has isolation='process', but takes injected arguments ({args}), which cannot "
            f"cross into a worker process: use isolation='thread', or drop them (a process-isolated tool reads "
            f"its idempotency key with reinloop.tools.idempotency_key())"
        )


def _require_picklable(tool: BaseTool, rules: ResultRules) -> None:
    # Each process-isolated call pickles the tool and its result rules to a worker: refuse it now rather
    # than at the first call.
    named = (
        ("the tool", tool),
        ("its check_result", rules.check),
        ("its is_error", rules.is_error),
        ("its retry_on", rules.retry_on),
    )
    for what, obj in named:
        try:
            pickle.dumps(obj)
        except Exception as exc:
            raise ConfigurationError(
                f"tool {tool.name!r} has isolation='process', but {what} cannot be pickled to a worker "
                f"process ({type(exc).__name__}: {exc}). Define it at module level: a BaseTool subclass, or "
                f"StructuredTool.from_function with a module-level function and args_schema (the @tool "
                f"decorator makes classes pickle cannot find); or use isolation='thread'."
            ) from None


class ToolRegistry:
    """Tools by unique name. Pass it (or a plain list of tools) to `build_agent`."""

    def __init__(self, tools: Iterable[BaseTool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        for tool in tools:
            self.add(tool)

    def add(
        self,
        tool: BaseTool | Callable[..., Any],
        *,
        check_result: ResultCheck = reject_empty,
        timeout_s: float | None = None,
        isolation: Isolation | None = None,
        idempotent: bool | None = None,
        retryable: bool | None = None,
        cacheable: bool | None = None,
        approve: bool | None = None,
        is_error: Callable[[str], bool] | None = None,
        retry_on: RetryOn | None = None,
    ) -> BaseTool:
        """Register a tool. `check_result` decides what counts as an empty result; `timeout_s` overrides
        the agent's tool timeout for this tool. A duplicate or reserved name raises `ConfigurationError`.

        `isolation`, `idempotent`, `retryable`, `cacheable` and `approve` default to the tool's own
        declaration in its metadata (`{"reinloop": {"isolation": "process", "idempotent": False, "retryable":
        False, "cacheable": False, "approve": True}}`), else "thread", True, False (below), True (False for a
        tool that takes the state, the store or a `ToolRuntime`: `reinloop.tools.injection`) and False.
        A retryable tool's call that raises or times out is run again in place (`AgentConfig.tool_attempts`),
        with the same idempotency key. Only a tool declared safe to repeat is retryable: `retryable=True` or an
        explicit `idempotent=True` (here or in its metadata), or an MCP tool's `readOnlyHint` or
        `idempotentHint` annotation. Any other tool's call runs once, since a call that failed may have had
        its effect; a timeout or a lost connection of it is reported to the model as in doubt.
        `cacheable=False` is for a tool whose result changes with time or with other calls' effects (a
        clock, a file read): an identical call soon after a success runs again instead of being answered
        with the earlier result.
        A call's outcome is an error when the tool raises (a `ToolException` too, whatever its
        `handle_tool_error`, whose wording is kept), returns a ToolMessage with status "error" (an MCP tool's
        error), or returns text that `is_error` says is an error (for a tool that reports failure in its text,
        ``is_error=lambda text: text.startswith("ERROR")``); each counts for the error streak and the breakers.
        Of those, a timeout, a crashed worker and an exception other than a ToolException are run again in
        place (when the tool is retryable); `retry_on` (exception types, or a predicate on the exception)
        says instead which of the tool's exceptions are.
        `approve=True` makes each call of the tool wait for a person to approve, edit or reject it before it
        runs (`reinloop.approvals`; the agent then needs a checkpointer); `build_agent(approve=[...])` asks for
        tools by name as well.
        `isolation="process"` runs each call in a warm worker process that is killed at the deadline: for
        tools that may hold the GIL (a catastrophic regex) or call `sys.exit()`. The tool and `check_result`
        are pickled to the worker, so they must be defined at module level (a `BaseTool` subclass, or
        `StructuredTool.from_function` with a module-level `args_schema`); the call gets its arguments but
        not the run's config, so callbacks do not see it. Workers start from a fresh interpreter
        (forkserver), which imports the main module again, as all multiprocessing without fork does: a
        script must keep its work under `if __name__ == "__main__":`.
        """
        lc_tool = as_tool(tool)
        name = lc_tool.name
        if name in self._tools:
            raise ConfigurationError(f"duplicate tool name {name!r}: every tool needs a unique name")
        if name in RESERVED_TOOL_NAMES:
            raise ConfigurationError(f"tool name {name!r} is reserved by reinloop; rename the tool")
        _check_timeout(name, timeout_s)
        schema, schema_json = _call_schema(lc_tool)
        json_validator = None
        if schema is None:  # a tool described only by a JSON schema (MCP's, OpenAPI's): loaded for those alone
            from reinloop.tools.json_schema import JsonArgsValidator

            json_validator = JsonArgsValidator.for_tool(name, schema_json)
        own_schema = lc_tool.args_schema
        extra_args = (
            isinstance(own_schema, type)
            and issubclass(own_schema, BaseModel)
            and own_schema.model_config.get("extra") == "allow"
        )
        injection = injection_of(lc_tool)
        # A result that depends on the state, the store or the run may differ for identical arguments.
        defaults = {"cacheable": False} if injection.reads_run else {}
        policy = _policy(
            lc_tool,
            defaults,
            isolation=isolation,
            idempotent=idempotent,
            retryable=retryable,
            cacheable=cacheable,
            approve=approve,
        )
        handler = lc_tool.handle_tool_error
        rules = ResultRules(check_result, is_error, retry_on, handler)
        if policy["isolation"] == "process":
            _require_in_process(lc_tool, injection)
            _require_picklable(lc_tool, rules)
        self._tools[name] = RegisteredTool(
            tool=lc_tool,
            check_result=check_result,
            timeout_s=timeout_s,
            schema=schema,
            schema_json=schema_json,
            extra_args=extra_args,
            isolation=policy["isolation"],
            idempotent=policy["idempotent"],
            retryable=policy["retryable"],
            cacheable=policy["cacheable"],
            json_validator=json_validator,
            injection=injection,
            approve=policy["approve"],
            rules=rules,
            run_as=lc_tool.model_copy(update={"handle_tool_error": False}) if handler else None,
        )
        return lc_tool

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry of the named tools only, in this one's order, each registered as it is here."""
        wanted = set(names)
        chosen = ToolRegistry()
        chosen._tools = {name: entry for name, entry in self._tools.items() if name in wanted}
        return chosen

    def __getitem__(self, name: str) -> RegisteredTool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[RegisteredTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def tools(self) -> list[BaseTool]:
        return [entry.tool for entry in self._tools.values()]

    def describe(self) -> str:
        """Each tool as `name: description` with its argument schema, for prompts without native tools."""
        lines = []
        for entry in self._tools.values():
            args = entry.schema_json.get("properties", {})
            required = entry.schema_json.get("required", [])
            lines.append(
                f"- {entry.name}: {entry.tool.description.strip()}\n"
                f"  arguments: {json.dumps(args, ensure_ascii=False)}; required: {json.dumps(required)}"
            )
        return "\n".join(lines)
