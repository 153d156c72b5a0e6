"""When the agent acts: the routers, and `build_agent`, which wires the nodes into the diagram.

START -> decide -> validate_args --ok--> execute_tool -> observe -> compress_memory -> check_finish
                      |  \\--parse error, retry left--> decide          (retry edge)
                      |--invalid / refused / cached--> observe         (error-feedback edge)
                      \\--final answer--> check_finish
check_finish --continue (or reflect)--> decide
check_finish --breaker tripped--> circuit_break -> END                 (circuit-break edge)
check_finish --answered--> END
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from functools import partial, wraps
from typing import (
    Annotated,
    Any,
    Final,
    Literal,
    TypeAlias,
    TypeVar,
    get_origin,
    get_type_hints,
)

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import RetryPolicy, Send
from typing_extensions import TypedDict

from reinloop._langgraph import CONFIG_KEY_DURABILITY, RunnableCallable
from reinloop.approvals import approval_tools
from reinloop.checkpoint import check_checkpointer
from reinloop.compiled import RECURSION_LIMIT_TEMPLATE, UNKNOWN_THREAD_TEMPLATE, CompiledAgent, compiled_agent
from reinloop.config import MAX_PARSE_RETRIES, AgentConfig, round_steps
from reinloop.context import AgentContext
from reinloop.errors import ConfigurationError
from reinloop.guards import Disable, Guard, default_guards, guard_table, steps_to_stop
from reinloop.middleware import UNUSED_KEYS, Middleware
from reinloop.models import is_transient, resolve_model
from reinloop.nodes import (
    acheck_finish,
    acompress_memory,
    adecide,
    aexecute_tool,
    check_finish,
    circuit_break,
    compress_memory,
    decide,
    execute_tool,
    observe,
    validate_args,
)
from reinloop.protocols import DecisionProtocol, get_protocol
from reinloop.state import AgentInput, AgentState, RunState, extended, run_state, runs
from reinloop.tools.registry import ToolRegistry

T = TypeVar("T")
_AgentGraph: TypeAlias = StateGraph[RunState, None, Any, AgentState]

__all__ = [
    "CHECK_FINISH",
    "CIRCUIT_BREAK",
    "COMPRESS_MEMORY",
    "DECIDE",
    "EXECUTE_TOOL",
    "OBSERVE",
    "RECURSION_LIMIT_TEMPLATE",
    "UNKNOWN_THREAD_TEMPLATE",
    "VALIDATE_ARGS",
    "CompiledAgent",
    "NodeName",
    "agent_topology",
    "build_agent",
    "recursion_limit",
    "route_after_check_finish",
    "route_after_validate_args",
]

NodeName = Literal[
    "decide", "validate_args", "execute_tool", "observe", "compress_memory", "check_finish", "circuit_break"
]
DECIDE: Final = "decide"
VALIDATE_ARGS: Final = "validate_args"
EXECUTE_TOOL: Final = "execute_tool"
OBSERVE: Final = "observe"
COMPRESS_MEMORY: Final = "compress_memory"
CHECK_FINISH: Final = "check_finish"
CIRCUIT_BREAK: Final = "circuit_break"

# The most LangGraph steps one round can take, whatever the settings (`round_steps`). Sizes the agent's
# default recursion limit, so that max_iterations, not step_limit, ends a run invoked without its own limit.
MAX_STEPS_PER_ROUND = round_steps(MAX_PARSE_RETRIES)


def recursion_limit(rounds: int) -> int:
    """A LangGraph recursion limit that lets `rounds` rounds (plus a circuit break) run to the end."""
    return (rounds + 1) * MAX_STEPS_PER_ROUND


AfterValidateArgs = Literal["decide", "execute_tool", "observe", "check_finish"]
AfterCheckFinish = Literal["decide", "circuit_break", "__end__"]
# Each conditional edge's label in the diagram (LangGraph's path map: what the router returns, to the node it
# leads to), as the README's diagram draws them.
VALIDATE_ARGS_EDGES: Final[dict[Hashable, str]] = {
    "ok": "execute_tool",
    "parse error, retry left": "decide",
    "invalid, refused or cached call": "observe",
    "final answer": "check_finish",
}
CHECK_FINISH_EDGES: Final[dict[Hashable, str]] = {
    "continue, or reflect": "decide",
    "breaker tripped": "circuit_break",
    "answered": "__end__",
}


def route_after_validate_args(state: AgentState) -> AfterValidateArgs | list[Send]:
    # 1. An unparsable reply with a retry left: ask again, with the correction hint (retry edge).
    if state.get("correction"):
        return DECIDE
    # 2. A final answer, or a middleware's stop: nothing to run.
    if state["decision"]["kind"] in ("answer", "stop"):
        return CHECK_FINISH
    # 3. Valid calls run, one task each, so each finished call is checkpointed on its own; calls answered
    #    from cache or refused do not run.
    runnable = [check for check in state.get("checks", []) if runs(check)]
    if runnable:
        return [Send(EXECUTE_TOOL, check) for check in runnable]
    # 4. Nothing to run: the rejections, answers from cache or the parse error go back to the model
    #    (error-feedback edge).
    return OBSERVE


def route_after_check_finish(state: AgentState) -> AfterCheckFinish:
    reason = state.get("finish_reason")
    # 1. Answered: done.
    if reason == "answered":
        return "__end__"  # END
    # 2. A breaker tripped: end gracefully, resumably (circuit-break edge).
    if reason is not None:
        return CIRCUIT_BREAK
    # 3. Otherwise: the next decision (a reflection turn when check_finish set `reflection`).
    return DECIDE


def build_agent(
    model: BaseChatModel | str,
    tools: Sequence[BaseTool | Callable[..., Any]] | ToolRegistry,
    *,
    config: AgentConfig | None = None,
    checkpointer: BaseCheckpointSaver[Any] | bool | None = None,
    store: BaseStore | None = None,
    protocol: DecisionProtocol | None = None,
    summary_model: BaseChatModel | str | None = None,
    name: str = "reinloop",
    state_schema: type[Any] = AgentState,
    approve: Sequence[str] | None = None,
    guards: Sequence[Guard | Disable] = (),
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
) -> CompiledAgent:
    """The agent loop as a compiled LangGraph graph. Invoke it with ``{"task": "..."}``.

    Args:
        model: A LangChain chat model, or a model string (``"openai:gpt-4o-mini"``), which gets the reply cap.
        tools: LangChain tools, typed callables with docstrings, or a `ToolRegistry` (per-tool settings).
        config: The limits, guards' thresholds and memory settings (`AgentConfig`); its defaults when None.
        checkpointer: Saves every step (resume and approvals need one); ``True`` takes the one given at run
            time, as LangGraph names it: a parent graph's for a subgraph, LangGraph Server's (`reinloop.server`).
        store: A LangGraph store with a semantic index, for long-term memory (`reinloop.memory.memory_store`).
        protocol: A custom `DecisionProtocol` object; by default `config.protocol` names a built-in one. If the
            config sets `protocol` explicitly, the object's `name` must match it (else `ConfigurationError`).
        summary_model: Writes the summaries of folded window entries; by default the agent's model, asked in
            its decisions' context (so from the provider's cache).
        name: The graph's name, as LangGraph and LangSmith show it.
        state_schema: `AgentState` extended with keys of your own (``class MyState(AgentState): cart:
            list[str]``), which tools read through `InjectedState` or `ToolRuntime.state` and write by returning
            ``Command(update=...)`` (`reinloop.tools.commands`).
        approve: Tools whose calls wait for a person to approve, edit or reject them (a LangGraph interrupt,
            answered with ``Command(resume=...)``: `reinloop.approvals`); tools may declare it themselves.
        guards: Guards of your own beside the built-in ones (`reinloop.guards`): one with a built-in guard's name
            replaces it, ``disable(name)`` drops one; a guard's `state_schema` keys join the state.
        middleware: LangChain `AgentMiddleware`, run at its places inside the nodes (`reinloop.middleware`):
            its tools join the agent's, its state keys the state.

    Returns:
        The compiled agent (`CompiledAgent`): a LangGraph graph with `hold`, `context_token_budget` and the
        guards it runs.

    Raises:
        ConfigurationError: settings that cannot work together, named with what to change.
    """
    if config is None:
        config = AgentConfig()
    elif not isinstance(config, AgentConfig):
        raise ConfigurationError(f"config must be an AgentConfig, got {type(config).__name__}")
    hooks = Middleware.of(middleware)
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    for tool in hooks.tools:
        if tool.name not in registry:  # a registry given twice with the same middleware has it already
            registry.add(tool)
    # A model string gets the reply cap, and so does the summarizer's: a summary (summary_max_chars) fits in it.
    cap = config.max_reply_tokens
    chat_model = resolve_model(model, max_reply_tokens=cap)
    summarizer = resolve_model(summary_model, max_reply_tokens=cap) if summary_model is not None else chat_model
    saved = checkpointer is not None and checkpointer is not False
    approvals = approval_tools(registry, approve, has_checkpointer=saved)
    table = guard_table(guards, default_guards(config))
    schemas = [guard.state_schema for guard in table if guard.state_schema is not None] + hooks.state_schemas
    reasons = [guard.name for guard in table if guard.stops]
    state_schema = extended(state_schema, schemas, skip=UNUSED_KEYS, reasons=reasons)
    protocol = get_protocol(config, protocol)
    ctx = _context(chat_model, registry, config, protocol, summarizer, state_schema, approvals, table, hooks)

    model_retry = RetryPolicy(
        initial_interval=config.model_retry_backoff_s,
        max_attempts=config.model_max_attempts,
        retry_on=is_transient,
    )
    graph = _diagram(lambda node: _bound(node, ctx), model_retry, state_schema)
    compiled = compiled_agent(
        graph.compile(checkpointer=checkpointer, store=store, name=name),
        first_steps=steps_to_stop(config.max_parse_retries),
        thread_wait_s=config.thread_wait_s,
        guards=table,
        fresh_budgets=ctx.fresh,
        context_token_budget=ctx.budget.tokens,
    )
    compiled = compiled.with_config(recursion_limit=recursion_limit(config.max_iterations))
    if not saved:
        # LangGraph has nothing to make durable (and fails on a durability without a checkpointer).
        return compiled
    if isinstance(checkpointer, BaseCheckpointSaver):
        check_checkpointer(checkpointer)
    # A default every invocation path reads (invoke, stream, batch, subgraphs) unless the caller passes
    # durability= explicitly: LangGraph reads a run's default durability from this configurable key (it is
    # how a parent graph passes its durability to subgraphs).
    return compiled.with_config(configurable={CONFIG_KEY_DURABILITY: config.durability})


def agent_topology(checkpointer: BaseCheckpointSaver[Any] | None = None, *, name: str = "reinloop") -> CompiledAgent:
    """The agent's graph with no model or tools behind its nodes: for drawing it, and for reading saved
    threads on `checkpointer` (``get_state``, ``get_state_history``) without building an agent. It cannot
    run: every node raises; `build_agent` makes the agent that runs.
    """
    return _diagram(lambda node: partial(_cannot_run, node.__name__), None).compile(
        checkpointer=checkpointer, name=name
    )


def _diagram(
    bind: Callable[[Callable[..., Any]], Any], model_retry: RetryPolicy | None, state_schema: type[Any] = AgentState
) -> _AgentGraph:
    """The nodes and edges of the diagram above, each node's function given by `bind`."""
    graph: _AgentGraph = StateGraph(run_state(state_schema), input_schema=AgentInput, output_schema=state_schema)
    graph.add_node(DECIDE, bind(decide), retry_policy=model_retry)
    graph.add_node(VALIDATE_ARGS, bind(validate_args))
    graph.add_node(EXECUTE_TOOL, bind(execute_tool))
    graph.add_node(OBSERVE, bind(observe))
    graph.add_node(COMPRESS_MEMORY, bind(compress_memory))
    graph.add_node(CHECK_FINISH, bind(check_finish))
    graph.add_node(CIRCUIT_BREAK, bind(circuit_break))

    graph.add_edge(START, DECIDE)
    graph.add_edge(DECIDE, VALIDATE_ARGS)
    graph.add_conditional_edges(
        VALIDATE_ARGS, _router(route_after_validate_args, VALIDATE_ARGS_EDGES), VALIDATE_ARGS_EDGES
    )
    graph.add_edge(EXECUTE_TOOL, OBSERVE)
    graph.add_edge(OBSERVE, COMPRESS_MEMORY)
    graph.add_edge(COMPRESS_MEMORY, CHECK_FINISH)
    graph.add_conditional_edges(CHECK_FINISH, _router(route_after_check_finish, CHECK_FINISH_EDGES), CHECK_FINISH_EDGES)
    graph.add_edge(CIRCUIT_BREAK, END)
    return graph


# The async form of each node that waits on I/O. The other nodes only compute: under ainvoke/astream they run
# as they are on the event loop, where LangGraph would otherwise hand each step to a worker thread.
_ASYNC_FORMS: dict[Callable[..., Any], Callable[..., Awaitable[dict[str, Any]]]] = {
    decide: adecide,
    compress_memory: acompress_memory,
    execute_tool: aexecute_tool,
    check_finish: acheck_finish,
}


def _bound(node: Callable[..., dict[str, Any]], ctx: AgentContext) -> RunnableCallable:
    """`node` given the agent's context, in its sync form for invoke/stream and its async form for
    ainvoke/astream: LangGraph picks one by how the graph runs (as `create_agent` registers its model node).
    LangGraph reads what to inject (config, store) from the sync form's signature."""
    anode = _ASYNC_FORMS.get(node) or _on_loop(node)
    func: Callable[..., dict[str, Any]] = partial(node, ctx=ctx)
    afunc: Callable[..., Awaitable[dict[str, Any]]] = partial(anode, ctx=ctx)
    if node is not execute_tool:  # the one node that is sent a call, not the state
        func, afunc = _changes_only(func), _achanges_only(afunc)
    return RunnableCallable(func, afunc, name=node.__name__, trace=False)


# The state keys without a reducer: writing the value such a key holds changes nothing, yet LangGraph would
# save, stream and version the write (on Postgres a new blob of the channel, every round).
_STATE_HINTS: Final = get_type_hints(AgentState, include_extras=True)
_PLAIN_KEYS: Final = frozenset(key for key, hint in _STATE_HINTS.items() if get_origin(hint) is not Annotated)
_UNSET: Final = object()


def _changes(state: AgentState, update: Any) -> Any:
    """A node's `update` without the plain keys it sets to the value they already hold."""
    if not isinstance(update, dict):
        return update
    return {key: value for key, value in update.items() if key not in _PLAIN_KEYS or state.get(key, _UNSET) != value}


def _changes_only(node: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """`node`, writing only what it changes (`_changes`); LangGraph reads its signature through `__wrapped__`."""

    @wraps(node)
    def run(state: AgentState, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return _changes(state, node(state, *args, **kwargs))  # type: ignore[no-any-return]

    return run


def _achanges_only(node: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """`_changes_only` for a node's async form."""

    @wraps(node)
    async def run(state: AgentState, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return _changes(state, await node(state, *args, **kwargs))  # type: ignore[no-any-return]

    return run


# The state keys each router reads. LangGraph reads a router's input schema, the type of its first parameter, for
# every call: these keys alone rather than every key of the state (tests/test_routers.py checks the routers read
# no other).
ROUTER_READS: Final[dict[str, tuple[str, ...]]] = {
    "route_after_validate_args": ("correction", "decision", "checks"),
    "route_after_check_finish": ("finish_reason",),
}
_ROUTER_SCHEMAS: Final[dict[str, type[Any]]] = {
    name: TypedDict(f"{name}_reads", {key: _STATE_HINTS[key] for key in keys}, total=False)  # type: ignore[operator]
    for name, keys in ROUTER_READS.items()
}


def _router(route: Callable[[AgentState], Any], edges: Mapping[Hashable, str]) -> RunnableCallable:
    """`route`, returning the label of the edge it takes (`edges` maps each label to its node; `Send`s pass
    through), reading only its keys of the state (`ROUTER_READS`), and running as it is under ainvoke/astream
    too: LangGraph would hand each call to a worker thread."""
    labels = {node: label for label, node in edges.items()}

    @wraps(route)
    def labelled(state: AgentState) -> Any:
        target = route(state)
        return labels[target] if isinstance(target, str) else target

    labelled.__annotations__ = {"state": _ROUTER_SCHEMAS[route.__name__], "return": Any}
    return RunnableCallable(labelled, _on_loop(labelled), name=route.__name__)


def _on_loop(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`function`, which only computes, as an async function that runs it directly on the event loop."""

    async def run(*args: Any, **kwargs: Any) -> T:
        return function(*args, **kwargs)

    return run


def _cannot_run(node: str, *args: Any, **kwargs: Any) -> Any:
    raise ConfigurationError(f"agent_topology() only draws and reads the graph, node {node!r} cannot run; "
                             "build the agent with build_agent()")  # fmt: skip


def _context(
    chat_model: BaseChatModel,
    registry: ToolRegistry,
    config: AgentConfig,
    protocol: DecisionProtocol,
    summarizer: BaseChatModel,
    state_schema: type[Any],
    approvals: frozenset[str],
    guards: tuple[Guard, ...],
    middleware: Middleware,
) -> AgentContext:
    try:
        ctx = AgentContext.create(
            config, registry, protocol, chat_model, summarizer, state_schema, approvals, guards, middleware
        )
    except NotImplementedError:
        raise ConfigurationError(
            f"{type(chat_model).__name__} does not support native tool calling (bind_tools); "
            'use AgentConfig(protocol="json")'
        ) from None
    if problem := ctx.budget.problem():
        raise ConfigurationError(problem)
    return ctx
