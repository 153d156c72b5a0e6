"""The model call inside decide, through the middleware's wrap_model_call hooks (the first outermost), as
create_agent composes them; the innermost handler calls the model the request names, bound as the protocol
binds the agent's model, with the provider's prompt caching added to what the hooks left
(`reinloop.models.caching`: a breakpoint a caching middleware placed counts, its top-level one stays its own)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable

from reinloop.drivers import Steps, io
from reinloop.models.caching import bound_settings, for_provider

if TYPE_CHECKING:
    from reinloop.context import AgentContext
    from reinloop.middleware.hooks import Middleware

__all__ = ["call_model"]


def call_model(
    middleware: Middleware,
    ctx: AgentContext,
    prompt: list[BaseMessage],
    state: Any,
    runtime: Any,
    cache_key: str | None = None,
) -> Steps[BaseMessage]:
    """The reply to `prompt`, through the wrap_model_call hooks (the first outermost); `cache_key`: the
    thread's prompt cache key."""
    system = prompt[0] if prompt and isinstance(prompt[0], SystemMessage) else None
    request = ModelRequest(
        model=ctx.chat_model,
        messages=cast(list[AnyMessage], prompt[1:] if system else list(prompt)),
        system_message=system,
        tools=list(ctx.registry.tools),
        state=state,
        runtime=runtime,
    )
    wrappers = middleware.with_hook("wrap_model_call")
    handler: Callable[[ModelRequest[Any]], ModelResponse[Any]] = partial(_call, ctx, cache_key)
    ahandler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]] = partial(_acall, ctx, cache_key)
    for item in reversed(wrappers):
        handler = partial(_layer, item.wrap_model_call, handler)
        ahandler = partial(_alayer, item.awrap_model_call, ahandler)
    response = yield from io(partial(handler, request), partial(ahandler, request))
    replies = [message for message in response.result if isinstance(message, AIMessage)]
    return replies[-1] if replies else AIMessage("")


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


def _sent(
    ctx: AgentContext, key: str | None, request: ModelRequest[Any]
) -> tuple[Runnable[Any, BaseMessage], list[BaseMessage], dict[str, Any]]:
    """The bound model, the messages and the call's keyword arguments, with the provider's prompt caching."""
    bound = _bound(ctx, request)
    system = [request.system_message] if request.system_message is not None else []
    messages, kwargs = for_provider(request.model, [*system, *request.messages], key, bound_settings(bound))
    return bound, messages, kwargs


def _call(ctx: AgentContext, key: str | None, request: ModelRequest[Any]) -> ModelResponse[Any]:
    bound, messages, kwargs = _sent(ctx, key, request)
    return ModelResponse(result=[bound.invoke(messages, **kwargs)])


async def _acall(ctx: AgentContext, key: str | None, request: ModelRequest[Any]) -> ModelResponse[Any]:
    bound, messages, kwargs = _sent(ctx, key, request)
    return ModelResponse(result=[await bound.ainvoke(messages, **kwargs)])
