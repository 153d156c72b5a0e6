"""The middleware an agent runs, and which of them have each hook: the part of `reinloop.middleware` the nodes
call (decide's turn is in `turn`, the model call in `model_call`, the tool call in `tool_call`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from reinloop.drivers import Steps, io
from reinloop.errors import ConfigurationError

if TYPE_CHECKING:
    from reinloop.context import AgentContext
    from reinloop.tools.registry import RegisteredTool

__all__ = [
    "MAX_MODEL_JUMPS",
    "NO_MIDDLEWARE",
    "STOPPED_TEMPLATE",
    "TASK_MESSAGE_ID",
    "UNUSED_KEYS",
    "Jump",
    "Middleware",
    "NodeHook",
    "overrides",
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
# Every hook a middleware may have (each with its async form `a<name>`).
HOOKS = ("before_agent", "before_model", "wrap_model_call", "after_model", "wrap_tool_call", "after_agent")


def overrides(middleware: AgentMiddleware[Any, Any, Any], hook: str) -> bool:
    """Whether `middleware` has its own `hook` (create_agent's test: not the base class's function)."""
    return getattr(type(middleware), hook, None) is not getattr(AgentMiddleware, hook)


def _has(middleware: AgentMiddleware[Any, Any, Any], hook: str) -> bool:
    return overrides(middleware, hook) or overrides(middleware, f"a{hook}")


@dataclass(frozen=True, slots=True)
class Middleware:
    """The agent's middleware, in the order given, and which of them have each hook."""

    items: tuple[AgentMiddleware[Any, Any, Any], ...] = ()
    # The items with each hook (its sync or async form), found once: the nodes ask every round and every call.
    by_hook: Mapping[str, tuple[AgentMiddleware[Any, Any, Any], ...]] = field(default_factory=dict)

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
        by_hook = {hook: tuple(item for item in items if _has(item, hook)) for hook in HOOKS}
        return cls(tuple(items), {hook: found for hook, found in by_hook.items() if found})

    def with_hook(self, hook: str) -> tuple[AgentMiddleware[Any, Any, Any], ...]:
        return self.by_hook.get(hook, ())

    @property
    def tools(self) -> list[BaseTool]:
        return [tool for item in self.items for tool in getattr(item, "tools", None) or []]

    @property
    def state_schemas(self) -> list[type[Any]]:
        return [item.state_schema for item in self.items]

    @property
    def around_model(self) -> bool:
        """Whether decide runs any hook."""
        return any(hook in self.by_hook for hook in ("before_agent", "before_model", "wrap_model_call", "after_model"))

    def node_hook(self, item: AgentMiddleware[Any, Any, Any], hook: NodeHook, state: Any, runtime: Any) -> Steps[Any]:
        """One node hook's update: the sync form under invoke, the async one under ainvoke (the sync form when
        the middleware has no async one of its own, as create_agent runs it)."""
        sync, asynchronous = getattr(item, hook), getattr(item, f"a{hook}")
        has_sync, has_async = overrides(item, hook), overrides(item, f"a{hook}")

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

    def call_model(
        self, ctx: AgentContext, prompt: list[BaseMessage], state: Any, runtime: Any, cache_key: str | None = None
    ) -> Steps[BaseMessage]:
        """The reply to `prompt`, through the wrap_model_call hooks (the first outermost); `cache_key`: the
        thread's prompt cache key."""
        from reinloop.middleware.model_call import call_model

        return (yield from call_model(self, ctx, prompt, state, runtime, cache_key))

    def wrapped(self, entry: RegisteredTool, call_id: str, ctx: AgentContext) -> RegisteredTool:
        """`entry`, running through the wrap_tool_call hooks (the first outermost); as it is when none has one
        or the tool runs in a worker process."""
        from reinloop.middleware.tool_call import wrapped

        return wrapped(self, entry, call_id, ctx)


NO_MIDDLEWARE = Middleware()
