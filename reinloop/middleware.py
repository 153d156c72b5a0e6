"""LangChain middleware inside the six nodes: what is written for `create_agent` runs in reinloop too.

`build_agent(..., middleware=[...])` takes LangChain `AgentMiddleware` objects (the shipped ones, your
subclasses, and the decorator forms: `@before_model`, `@wrap_model_call`, `@wrap_tool_call`,
`@dynamic_prompt`, ...) and runs each hook at its place inside the nodes; the diagram gains no node.

- `before_agent`: in decide, at the start of a run (a thread's first task, or a new task on it), in list order.
- `before_model`, `wrap_model_call`, `after_model`: in decide, around its model call, as create_agent orders
  them: `before_model` in list order, the first `wrap_model_call` outermost, `after_model` in reverse order.
- `wrap_tool_call`: in execute_tool, around each run of a validated call (each in-place attempt), inside
  reinloop's timeout, in the call's thread (not for a tool with isolation="process", whose run is in a
  worker process); the handler raises what the tool raised, as LangChain's ToolNode does.
- `after_agent`: in check_finish, when the run ends (answered, or stopped), in reverse order.
- `state_schema`: its keys join the agent's state (`messages` stays reinloop's window, and create_agent's
  `jump_to` and `structured_response` are not used); `tools`: added to the agent's tools, validated and guarded
  like any other. Sync hooks run under ainvoke too; an async-only hook needs ainvoke.
- `jump_to`: "end" from `before_agent`, `before_model` or `after_model` ends the run with finish reason
  `middleware` (exit code 9), the hook's message (the last AI message it added) as the run's final message;
  "model" from `after_model` asks the model again (at most `MAX_MODEL_JUMPS` times in one decision); "tools"
  is the way a decision goes anyway.

What a hook sees as `state`: the agent's state, with `messages` as create_agent's loop would hold them, the task
as the first HumanMessage and then the window. A hook that changes the task message changes the task (so
PIIMiddleware redacts it in the saved state, as create_agent's state would hold it); one that changes the
window (replacing messages by id, or removing them all and writing new ones, as SummarizationMiddleware does)
replaces it. A ToolMessage an `after_model` hook adds for a call of the reply answers that call: the call does
not run, and the hook's message is its observation (`blocked`; ToolCallLimitMiddleware's "continue").
HumanInTheLoopMiddleware is refused: reinloop's own approvals (`approve=`) interrupt after the reply is saved,
where an interrupt inside decide would call the model again on resume.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast
from uuid import uuid4

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime

from reinloop.drivers import Steps, io
from reinloop.errors import ConfigurationError
from reinloop.tools.injection import read_state, tool_runtime

if TYPE_CHECKING:
    from reinloop.context import AgentContext
    from reinloop.tools.registry import RegisteredTool

__all__ = [
    "MAX_MODEL_JUMPS",
    "NO_MIDDLEWARE",
    "TASK_MESSAGE_ID",
    "Middleware",
    "ModelTurn",
    "current_runtime",
    "model_turn",
    "rewritten",
]

# The id of the task as the first HumanMessage of the messages middleware sees.
TASK_MESSAGE_ID = "reinloop-task"
# "model" jumps from after_model one decision may take before reinloop stops honouring them.
MAX_MODEL_JUMPS = 3
# create_agent's own keys, which reinloop does not use.
UNUSED_KEYS = frozenset({"jump_to", "structured_response"})
STOPPED_TEMPLATE = "Stopped by middleware {name!r}."
# Node hooks, each with its async form `a<name>`.
NodeHook = Literal["before_agent", "before_model", "after_model", "after_agent"]
Jump = Literal["model", "tools", "end"]


def _overrides(middleware: AgentMiddleware[Any, Any, Any], hook: str) -> bool:
    """Whether `middleware` has its own `hook` (create_agent's test: not the base class's function)."""
    return getattr(type(middleware), hook, None) is not getattr(AgentMiddleware, hook)


def _has(middleware: AgentMiddleware[Any, Any, Any], hook: str) -> bool:
    return _overrides(middleware, hook) or _overrides(middleware, f"a{hook}")


@dataclass(frozen=True, slots=True)
class Middleware:
    """The agent's middleware, in the order given, and which of them have each hook."""

    items: tuple[AgentMiddleware[Any, Any, Any], ...] = ()

    @classmethod
    def of(cls, items: Sequence[AgentMiddleware[Any, Any, Any]]) -> Middleware:
        from langchain.agents.middleware import HumanInTheLoopMiddleware

        for item in items:
            if not isinstance(item, AgentMiddleware):
                raise ConfigurationError(f"middleware must be LangChain AgentMiddleware, got {type(item).__name__}")
            if isinstance(item, HumanInTheLoopMiddleware):
                raise ConfigurationError(
                    "HumanInTheLoopMiddleware interrupts inside the model's node, which would call the model again "
                    "on resume: use build_agent(approve=[tool names]), reinloop's approvals (approve, edit or "
                    "reject each call after the reply is saved)"
                )
        names = [item.name for item in items]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"middleware names must be unique (create_agent's rule): {names}")
        return cls(tuple(items))

    def with_hook(self, hook: str) -> list[AgentMiddleware[Any, Any, Any]]:
        return [item for item in self.items if _has(item, hook)]

    @property
    def tools(self) -> list[BaseTool]:
        return [tool for item in self.items for tool in getattr(item, "tools", None) or []]

    @property
    def state_schemas(self) -> list[type[Any]]:
        return [item.state_schema for item in self.items]

    @property
    def around_model(self) -> bool:
        """Whether decide runs any hook."""
        return any(self.with_hook(hook) for hook in ("before_agent", "before_model", "wrap_model_call", "after_model"))

    def node_hook(self, item: AgentMiddleware[Any, Any, Any], hook: NodeHook, state: Any, runtime: Any) -> Steps[Any]:
        """One node hook's update: the sync form under invoke, the async one under ainvoke (the sync form when
        the middleware has no async one of its own, as create_agent runs it)."""
        sync, asynchronous = getattr(item, hook), getattr(item, f"a{hook}")
        has_sync, has_async = _overrides(item, hook), _overrides(item, f"a{hook}")

        def run() -> Any:
            if not has_sync:
                raise ConfigurationError(
                    f"middleware {item.name!r} has only an async {hook}: run the agent with ainvoke"
                )
            return sync(state, runtime)

        async def arun() -> Any:
            return await asynchronous(state, runtime) if has_async else sync(state, runtime)

        return (yield from io(run, arun))

    def after_agent(self, state: dict[str, Any], runtime: Any) -> Steps[dict[str, Any]]:
        """The after_agent hooks' state changes (keys other than `messages`), in reverse order."""
        written: dict[str, Any] = {}
        for item in reversed(self.with_hook("after_agent")):
            update = yield from self.node_hook(item, "after_agent", {**state, **written}, runtime)
            written.update({key: value for key, value in (update or {}).items() if key not in ("messages", "jump_to")})
        return written

    # The model call --------------------------------------------------------------------------------------

    def call_model(self, ctx: AgentContext, prompt: list[BaseMessage], state: Any, runtime: Any) -> Steps[BaseMessage]:
        """The reply to `prompt`, through the wrap_model_call hooks (the first outermost)."""
        system = prompt[0] if prompt and isinstance(prompt[0], SystemMessage) else None
        request = ModelRequest(
            model=ctx.chat_model,
            messages=cast(list[AnyMessage], prompt[1:] if system else list(prompt)),
            system_message=system,
            tools=list(ctx.registry.tools),
            state=state,
            runtime=runtime,
        )
        wrappers = self.with_hook("wrap_model_call")
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]] = partial(_call, ctx)
        ahandler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]] = partial(_acall, ctx)
        for item in reversed(wrappers):
            handler = partial(_layer, item.wrap_model_call, handler)
            ahandler = partial(_alayer, item.awrap_model_call, ahandler)
        response = yield from io(partial(handler, request), partial(ahandler, request))
        replies = [message for message in response.result if isinstance(message, AIMessage)]
        return replies[-1] if replies else AIMessage("")

    # The tool call ---------------------------------------------------------------------------------------

    def wrapped(self, entry: RegisteredTool, call_id: str, ctx: AgentContext) -> RegisteredTool:
        """`entry`, running through the wrap_tool_call hooks (the first outermost); as it is when none has one
        or the tool runs in a worker process."""
        wrappers = self.with_hook("wrap_tool_call")
        if not wrappers or entry.isolation == "process":
            return entry
        return replace(entry, run_as=_WrappedTool(entry.runner, tuple(wrappers), call_id, ctx))  # type: ignore[arg-type]


NO_MIDDLEWARE = Middleware()


def _response(result: Any) -> ModelResponse[Any]:
    if isinstance(result, ModelResponse):
        return result
    if isinstance(result, ExtendedModelResponse):
        return result.model_response
    if isinstance(result, AIMessage):
        return ModelResponse(result=[result])
    raise TypeError(f"wrap_model_call returned {type(result).__name__}, not a ModelResponse or an AIMessage")


def _layer(wrap: Callable[..., Any], inner: Callable[..., Any], request: ModelRequest[Any]) -> ModelResponse[Any]:
    return _response(wrap(request, inner))


async def _alayer(
    wrap: Callable[..., Awaitable[Any]], inner: Callable[..., Any], request: ModelRequest[Any]
) -> ModelResponse[Any]:
    return _response(await wrap(request, inner))


def _bound(ctx: AgentContext, request: ModelRequest[Any]) -> Runnable[Any, BaseMessage]:
    """The model as the request asks for it: the agent's own binding when nothing changed, else the request's
    model bound by the protocol (with its tools, tool choice and settings for native tool calling)."""
    tools = [getattr(tool, "name", None) for tool in request.tools]
    settings = dict(request.model_settings)
    if request.model is ctx.chat_model and tools == ctx.registry.names and not settings and request.tool_choice is None:
        return ctx.model
    if ctx.protocol.name == "tool_calling":
        if request.tools:
            return request.model.bind_tools(request.tools, tool_choice=request.tool_choice, **settings)
        return request.model.bind(**settings)
    # A text protocol lists the tools in its instructions: the request's tools do not change them.
    bound = ctx.protocol.bind(request.model, ctx.registry)
    return bound.bind(**settings) if settings else bound


def _messages(request: ModelRequest[Any]) -> list[AnyMessage]:
    system = [request.system_message] if request.system_message is not None else []
    return [*system, *request.messages]


def _call(ctx: AgentContext, request: ModelRequest[Any]) -> ModelResponse[Any]:
    return ModelResponse(result=[_bound(ctx, request).invoke(_messages(request))])


async def _acall(ctx: AgentContext, request: ModelRequest[Any]) -> ModelResponse[Any]:
    return ModelResponse(result=[await _bound(ctx, request).ainvoke(_messages(request))])


# decide's turn -------------------------------------------------------------------------------------------


@dataclass
class ModelTurn:
    """What decide's model call came to with the hooks around it."""

    replies: list[tuple[BaseMessage, list[BaseMessage]]] = field(default_factory=list)  # each reply and its prompt
    stop: str | None = None  # a hook ended the run (jump_to "end"): its message
    task: str | None = None  # the task as the hooks left it, when they changed it
    window: list[AnyMessage] | None = None  # the window as the hooks left it, when they changed it
    blocked: dict[str, str] = field(default_factory=dict)  # calls of the reply a hook answered: their messages
    written: dict[str, Any] = field(default_factory=dict)  # the hooks' other state changes

    @property
    def reply(self) -> BaseMessage | None:
        return self.replies[-1][0] if self.replies else None


class _View:
    """The state as middleware sees it, with the hooks' changes applied as create_agent's reducers would."""

    def __init__(self, state: dict[str, Any]) -> None:
        task = HumanMessage(state.get("task", ""), id=TASK_MESSAGE_ID)
        self.window = list(state.get("messages", []))
        self.values: dict[str, Any] = {**state, "messages": [task, *self.window]}
        self.written: dict[str, Any] = {}
        self.stopped_by: str | None = None

    def apply(self, item: AgentMiddleware[Any, Any, Any], update: Any) -> Jump | None:
        if not update:
            return None
        update = dict(update)
        jump = update.pop("jump_to", None)
        if "messages" in update:
            self.values["messages"] = add_messages(self.values["messages"], update.pop("messages"))
        self.values.update(update)
        self.written.update({key: value for key, value in update.items() if key not in UNUSED_KEYS})
        if jump == "end":
            self.stopped_by = item.name
        return jump  # type: ignore[no-any-return]

    def stop_text(self, since: int) -> str:
        added = [m for m in self.values["messages"][since:] if isinstance(m, AIMessage) and m.text]
        return added[-1].text if added else STOPPED_TEMPLATE.format(name=self.stopped_by)

    def message(self, message_id: str | None) -> BaseMessage | None:
        return next((m for m in self.values["messages"] if m.id == message_id), None)


def model_turn(
    middleware: Middleware,
    ctx: AgentContext,
    state: dict[str, Any],
    prompt_for: Callable[[dict[str, Any]], list[BaseMessage]],
    starts: bool,
) -> Steps[ModelTurn]:
    """decide's model call with the hooks around it: before_agent (when the run `starts`), before_model, the
    model through wrap_model_call, after_model. `prompt_for` builds the prompt from the state as the hooks left
    it."""
    runtime = current_runtime()
    view, turn = _View(state), ModelTurn()
    if starts and (yield from _hooks(middleware, "before_agent", view, runtime)) == "end":
        turn.stop = view.stop_text(0)
        return _finish(turn, view, state)
    for _ in range(MAX_MODEL_JUMPS + 1):
        since = len(view.values["messages"])
        if (yield from _hooks(middleware, "before_model", view, runtime)) == "end":
            turn.stop = view.stop_text(since)
            return _finish(turn, view, state)
        prompt = prompt_for(_shown(state, view))
        reply = yield from middleware.call_model(ctx, prompt, view.values, runtime)
        if reply.id is None:
            reply = reply.model_copy(update={"id": f"run-{uuid4()}"})
        turn.replies.append((reply, prompt))
        at = len(view.values["messages"])
        view.values["messages"] = [*view.values["messages"], reply]
        jump = yield from _hooks(middleware, "after_model", view, runtime)
        if jump == "end":
            turn.stop = view.stop_text(at + 1)
            return _finish(turn, view, state)
        if jump != "model":
            return _finish(turn, view, state, reply)
        view.values["messages"] = view.values["messages"][:at]  # asked again: this reply is not the decision
    return _finish(turn, view, state)


def _hooks(middleware: Middleware, hook: NodeHook, view: _View, runtime: Any) -> Steps[Jump | None]:
    """Run `hook` of each middleware that has it (after_model in reverse order), until one jumps: "end", or
    "model" from after_model."""
    items = middleware.with_hook(hook)
    for item in reversed(items) if hook == "after_model" else items:
        jump = view.apply(item, (yield from middleware.node_hook(item, hook, view.values, runtime)))
        if jump == "end" or (jump == "model" and hook == "after_model"):
            return jump
    return None


def _shown(state: dict[str, Any], view: _View) -> dict[str, Any]:
    """`state` with the task and window as the hooks left them, for the prompt."""
    task, window = _task_and_window(view.values["messages"], state)
    return {**state, **view.written, "task": task, "messages": window}


def _task_and_window(messages: list[AnyMessage], state: dict[str, Any]) -> tuple[str, list[AnyMessage]]:
    task = next((m.text for m in messages if m.id == TASK_MESSAGE_ID), state.get("task", ""))
    return task, [m for m in messages if m.id != TASK_MESSAGE_ID]


def _finish(turn: ModelTurn, view: _View, state: dict[str, Any], reply: BaseMessage | None = None) -> ModelTurn:
    messages = view.values["messages"]
    turn.written = view.written
    if reply is not None:
        final = view.message(reply.id) or reply
        turn.replies[-1] = (final, turn.replies[-1][1])
        calls = {call["id"] for call in getattr(final, "tool_calls", [])}
        turn.blocked = {
            m.tool_call_id: m.text for m in messages if isinstance(m, ToolMessage) and m.tool_call_id in calls
        }
        after = [m.id for m in messages].index(final.id)
        messages = messages[:after]
    if turn.stop is not None:
        return turn
    task, window = _task_and_window(messages, state)
    if task != state.get("task"):
        turn.task = task
    if [(m.id, m.content) for m in window] != [(m.id, m.content) for m in view.window]:
        turn.window = window
    return turn


def rewritten(window: list[AnyMessage]) -> list[Any]:
    """The write that replaces the saved window with `window`."""
    from langchain_core.messages import RemoveMessage

    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window]


def current_runtime() -> Runtime[Any]:
    """LangGraph's runtime of the running node; an empty one outside a graph (a node called directly)."""
    from langgraph.runtime import get_runtime

    try:
        return get_runtime()
    except RuntimeError:
        return Runtime()


# The tool call ---------------------------------------------------------------------------------------------


class _WrappedTool:
    """A tool that runs through the wrap_tool_call hooks: what execute_tool runs in its place."""

    def __init__(
        self, tool: BaseTool, wrappers: tuple[AgentMiddleware[Any, Any, Any], ...], call_id: str, ctx: AgentContext
    ) -> None:
        from reinloop.tools.execution import is_async_tool

        self.tool, self.wrappers, self.call_id, self.ctx = tool, wrappers, call_id, ctx
        self.name = tool.name
        self.response_format = tool.response_format
        # Awaited on the event loop under ainvoke (`is_async_tool` reads this) when the tool is, or a wrapper has
        # only its async form (create_agent's ToolNode runs the async chain under ainvoke).
        async_only = any(not _overrides(item, "wrap_tool_call") for item in wrappers)
        self.coroutine = True if is_async_tool(tool) or async_only else None

    def _request(self, input: Any, config: RunnableConfig | None) -> ToolCallRequest:
        config = config or {}
        if isinstance(input, dict) and input.get("type") == "tool_call":
            call = dict(input)
        else:
            call = {"type": "tool_call", "name": self.name, "args": input, "id": self.call_id}
        state = read_state(config, self.ctx.state_keys)
        runtime = tool_runtime(config, state, self.call_id, self.ctx.registry.tools)
        return ToolCallRequest(tool_call=call, tool=self.tool, state=state, runtime=runtime)  # type: ignore[arg-type]

    def invoke(self, input: Any, config: RunnableConfig | None = None) -> Any:
        def execute(request: ToolCallRequest) -> Any:
            return self.tool.invoke({**request.tool_call, "type": "tool_call"}, config)

        handler: Callable[[ToolCallRequest], Any] = execute
        for item in reversed(self.wrappers):
            handler = partial(_wrap_layer, item.wrap_tool_call, handler)
        return handler(self._request(input, config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None) -> Any:
        async def execute(request: ToolCallRequest) -> Any:
            return await self.tool.ainvoke({**request.tool_call, "type": "tool_call"}, config)

        handler: Callable[[ToolCallRequest], Awaitable[Any]] = execute
        for item in reversed(self.wrappers):
            handler = partial(_wrap_layer, item.awrap_tool_call, handler)
        result = handler(self._request(input, config))
        return await result if inspect.isawaitable(result) else result


def _wrap_layer(wrap: Callable[..., Any], inner: Callable[..., Any], request: ToolCallRequest) -> Any:
    return wrap(request, inner)
