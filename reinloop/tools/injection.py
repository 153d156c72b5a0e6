"""LangChain's injected tool arguments inside reinloop: what a tool takes besides the model's arguments.

A tool may declare arguments the model neither sees nor controls: `ToolRuntime`, `InjectedState`,
`InjectedToolCallId` and `InjectedStore`. LangChain's `tool_call_schema` leaves them out, and the registry
builds the bound schema, the signature shown in error observations and validate_args's validation from it.
execute_tool fills them in right before the call (`inject`), as LangGraph's `ToolNode` does. Values the model
sent under their names are dropped, so it cannot forge them; injected values are never saved in a checkpoint
nor echoed into an observation (`results.describe_error` describes an error without its input values).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolRuntime

from reinloop._langgraph import CONFIG_KEY_READ, CONFIG_KEY_RUNTIME, get_all_injected_args
from reinloop.errors import ConfigurationError

__all__ = [
    "NO_INJECTION",
    "Injection",
    "check_state_fields",
    "inject",
    "injection_of",
    "read_state",
    "state_keys",
    "tool_runtime",
]

NO_STORE_TEMPLATE = (
    "tool {name!r} takes the store ({arg!r}: InjectedStore or ToolRuntime.store), but the agent has none: "
    "build it with build_agent(..., store=...)"
)
MISSING_KEY_TEMPLATE = (
    "tool {name!r} takes state key {key!r} ({arg!r}: InjectedState({key!r})), which is not set in this "
    "thread: give {arg!r} a default, or set the key before the tool may be called"
)
UNKNOWN_KEY_TEMPLATE = (
    "tool {name!r} takes state key {key!r} ({arg!r}: InjectedState({key!r})), which the agent's state does not "
    "have; the keys are: {keys}"
)


@dataclass(frozen=True, slots=True)
class Injection:
    """The injected arguments of one tool, found once when it is registered."""

    state: tuple[tuple[str, str | None], ...] = ()  # (argument, state key); None: the whole state
    optional_state: frozenset[str] = frozenset()  # state arguments with a default: left out when the key is unset
    store: str | None = None  # the argument that gets the store
    runtime: str | None = None  # the argument that gets the ToolRuntime
    keys: frozenset[str] = frozenset()  # every injected argument, the call id's included

    @property
    def needed(self) -> bool:
        """Whether the tool takes any injected argument (and so is invoked with a ToolCall)."""
        return bool(self.keys) or self.runtime is not None

    @property
    def reads_run(self) -> bool:
        """Whether what the tool returns may depend on the state, the store or the run, not only its arguments."""
        return bool(self.state) or self.store is not None or self.runtime is not None


NO_INJECTION = Injection()


def injection_of(tool: BaseTool) -> Injection:
    """The injected arguments `tool` declares, found as LangGraph's ToolNode finds them."""
    found = get_all_injected_args(tool)
    keys = frozenset(found.all_injected_keys)
    return Injection(
        state=tuple(found.state.items()),
        optional_state=frozenset(found._optional_state_args),
        store=found.store,
        # ToolNode also takes any argument named `runtime` for the ToolRuntime, even `runtime: int`, which the
        # model's schema keeps (a film's length): only one annotated as ToolRuntime is injected here.
        runtime=found.runtime if found.runtime in keys else None,
        keys=keys,
    )


def state_keys(schema: type[Any]) -> frozenset[str]:
    """The keys of a state TypedDict."""
    return frozenset(get_type_hints(schema))


def check_state_fields(tools: Iterable[tuple[str, Injection]], keys: frozenset[str]) -> None:
    """Raise `ConfigurationError` at build time for an `InjectedState("key")` naming a key the state lacks."""
    for name, injection in tools:
        for arg, key in injection.state:
            if key is not None and key not in keys:
                known = ", ".join(sorted(keys))
                raise ConfigurationError(UNKNOWN_KEY_TEMPLATE.format(name=name, key=key, arg=arg, keys=known))


def inject(
    tool: BaseTool,
    injection: Injection,
    args: Mapping[str, Any],
    call_id: str,
    config: RunnableConfig,
    keys: frozenset[str],
    tools: list[BaseTool],
) -> dict[str, Any]:
    """The LangChain `ToolCall` that runs `tool` with the model's `args` and its injected arguments.

    `config` is the config the tool will get (a node's config: LangGraph's runtime and state reader are in
    it); `keys` are the state's keys, `tools` the agent's tools (for `ToolRuntime.tools`). As LangGraph's
    `ToolNode` fills them:

    - `InjectedState` gets the agent's state as it was when the step began (`AgentState`, plus the keys of a
      custom `state_schema`), or the named key of it; a key that is not set is left out when the argument has a
      default, and is a `ConfigurationError` when it has none.
    - `InjectedToolCallId` gets the call's id (the tool is invoked with a LangChain `ToolCall`, as ToolNode
      does, so its result reaches the result check as the `ToolMessage` LangChain wraps it in).
    - `InjectedStore` gets the graph's store (`build_agent(store=...)`); none is a `ConfigurationError`.
    - `ToolRuntime` gets LangGraph's runtime for the call: state, context, config (with the idempotency key),
      stream writer (`stream_mode="custom"`), call id, store and the agent's tools.
    """
    configurable = config.get("configurable") or {}
    runtime = configurable.get(CONFIG_KEY_RUNTIME)
    store = getattr(runtime, "store", None)
    state = _read_state(configurable, keys) if injection.state or injection.runtime else {}
    injected: dict[str, Any] = {}
    for arg, key in injection.state:
        if key is None:
            injected[arg] = state
        elif key in state:
            injected[arg] = state[key]
        elif arg not in injection.optional_state:
            raise ConfigurationError(MISSING_KEY_TEMPLATE.format(name=tool.name, key=key, arg=arg))
    if injection.store is not None:
        if store is None:
            raise ConfigurationError(NO_STORE_TEMPLATE.format(name=tool.name, arg=injection.store))
        injected[injection.store] = store
    if injection.runtime is not None:
        injected[injection.runtime] = tool_runtime(config, state, call_id, tools)
    model_args = {key: value for key, value in args.items() if key not in injection.keys}
    return {"type": "tool_call", "name": tool.name, "args": {**model_args, **injected}, "id": call_id}


def tool_runtime(config: RunnableConfig, state: dict[str, Any], call_id: str, tools: list[BaseTool]) -> ToolRuntime:
    """LangGraph's runtime for one tool call, as ToolNode builds it: for `ToolRuntime` arguments, and for the
    requests of LangChain middleware's `wrap_tool_call` (`reinloop.middleware`)."""
    runtime = (config.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
    return ToolRuntime(
        state=state,
        context=getattr(runtime, "context", None),
        config=config,
        stream_writer=getattr(runtime, "stream_writer", _no_writer),
        tool_call_id=call_id,
        store=getattr(runtime, "store", None),
        tools=tools,
        execution_info=getattr(runtime, "execution_info", None),
        server_info=getattr(runtime, "server_info", None),
    )


def read_state(config: RunnableConfig, keys: frozenset[str]) -> dict[str, Any]:
    """The state as the step began, inside a `Send` task (`_read_state`); {} outside a graph."""
    return _read_state(config.get("configurable") or {}, keys)


def _read_state(configurable: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """The state as the step began. execute_tool runs as a `Send` task, whose input is the call, not the state:
    LangGraph's reader for the task gives the state's channels (as ToolNode reads them for its Send tasks)."""
    read = configurable.get(CONFIG_KEY_READ)
    if read is None:  # not inside a graph (a node called directly, in a test)
        return {}
    state: dict[str, Any] = read(sorted(keys), False)
    return state


def _no_writer(chunk: Any) -> None:
    """The stream writer outside a graph run: writes go nowhere, as LangGraph's own default does."""
