"""The tool call inside execute_tool, through the middleware's wrap_tool_call hooks (the first outermost), as
LangChain's ToolNode runs them: the innermost handler invokes the tool with the call (and raises what it
raised); what the chain returns is judged as the tool's result. It runs where the tool runs, inside reinloop's
timeout, each in-place attempt."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from reinloop.middleware.hooks import overrides
from reinloop.tools.injection import read_state, tool_runtime

if TYPE_CHECKING:
    from reinloop.context import AgentContext
    from reinloop.middleware.hooks import Middleware
    from reinloop.tools.registry import RegisteredTool

__all__ = ["wrapped"]


def wrapped(middleware: Middleware, entry: RegisteredTool, call_id: str, ctx: AgentContext) -> RegisteredTool:
    """`entry`, running through the wrap_tool_call hooks (the first outermost); as it is when none has one
    or the tool runs in a worker process."""
    wrappers = middleware.with_hook("wrap_tool_call")
    if not wrappers or entry.isolation == "process":
        return entry
    return replace(entry, run_as=_WrappedTool(entry.runner, wrappers, call_id, ctx))  # type: ignore[arg-type]


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
        async_only = any(not overrides(item, "wrap_tool_call") for item in wrappers)
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
