"""The tools an agent may call, by name, with their schemas, time limits and result checks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel

from reinloop.errors import ConfigurationError
from reinloop.tools.results import ResultCheck, reject_empty

__all__ = ["RESERVED_TOOL_NAMES", "RegisteredTool", "ToolRegistry", "as_tool"]

# Names the decision protocols use for themselves (the json protocol's final answer action).
RESERVED_TOOL_NAMES = frozenset({"final_answer"})


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
    idempotent: bool = True  # False: never run twice; a call in flight at a crash is reported, not re-run

    @property
    def name(self) -> str:
        return self.tool.name


def _call_schema(tool: BaseTool) -> tuple[type[BaseModel] | None, dict[str, Any]]:
    # tool_call_schema leaves out injected arguments (InjectedToolArg, InjectedState, ...), which the model
    # neither sees nor controls.
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema, schema.model_json_schema()
    return None, dict(schema) if isinstance(schema, dict) else {}


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
    ) -> BaseTool:
        """Register a tool. `check_result` decides what counts as an empty result; `timeout_s` overrides
        the agent's tool timeout for this tool. A duplicate or reserved name raises `ConfigurationError`."""
        lc_tool = as_tool(tool)
        name = lc_tool.name
        if name in self._tools:
            raise ConfigurationError(f"duplicate tool name {name!r}: every tool needs a unique name")
        if name in RESERVED_TOOL_NAMES:
            raise ConfigurationError(f"tool name {name!r} is reserved by reinloop; rename the tool")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigurationError(f"timeout_s for tool {name!r} must be positive, got {timeout_s!r}")
        schema, schema_json = _call_schema(lc_tool)
        own_schema = lc_tool.args_schema
        extra_args = (
            isinstance(own_schema, type)
            and issubclass(own_schema, BaseModel)
            and own_schema.model_config.get("extra") == "allow"
        )
        idempotent = bool(((lc_tool.metadata or {}).get("reinloop") or {}).get("idempotent", True))
        self._tools[name] = RegisteredTool(
            lc_tool, check_result, timeout_s, schema, schema_json, extra_args, idempotent
        )
        return lc_tool

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

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
