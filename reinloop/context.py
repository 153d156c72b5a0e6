"""What every node may use besides state: the build-time dependencies of one compiled agent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from reinloop.budget import ContextBudget, input_window
from reinloop.config import AgentConfig
from reinloop.errors import ConfigurationError
from reinloop.guards import DEFAULT_GUARDS, Guard, default_guards, fresh_budgets
from reinloop.memory.tokens import TokenCounter
from reinloop.middleware import NO_MIDDLEWARE, Middleware
from reinloop.protocols import DecisionProtocol
from reinloop.state import FRESH_BUDGETS, AgentState
from reinloop.tools.injection import check_state_fields, state_keys
from reinloop.tools.registry import ToolRegistry

__all__ = ["AgentContext"]

AGENT_STATE_KEYS = state_keys(AgentState)


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Fixed at build time and shared by the nodes; never checkpointed."""

    settings: AgentConfig
    registry: ToolRegistry
    protocol: DecisionProtocol
    model: Runnable[Any, BaseMessage]  # the chat model as the protocol binds it
    system_prompt: str | None  # settings.system_prompt plus the protocol's instructions; None: no system message
    summarizer: Runnable[Any, BaseMessage] | None  # folds window entries into summaries; None: extractive only
    counter: TokenCounter  # the model's tokenizer, offline
    tool_tokens: int  # what the tool schemas the protocol sends beside the messages cost
    budget: ContextBudget  # the tokens one model call may be sent (`reinloop.budget`)
    state_keys: frozenset[str] = AGENT_STATE_KEYS  # the state's keys: what InjectedState and ToolRuntime.state read
    tool_keys: frozenset[str] = frozenset()  # the state_schema's and middleware's keys: what a tool's Command may write
    approvals: frozenset[str] = frozenset()  # the tools whose calls wait for a person's approval (`reinloop.approvals`)
    guards: tuple[Guard, ...] = DEFAULT_GUARDS  # in table order (`reinloop.guards.guard_table`)
    fresh: dict[str, Any] = field(default_factory=lambda: fresh_budgets(DEFAULT_GUARDS, FRESH_BUDGETS))
    middleware: Middleware = NO_MIDDLEWARE  # LangChain middleware run inside the nodes (`reinloop.middleware`)
    chat_model: Any = None  # the model as given, before the protocol bound it (what middleware requests name)
    narrowed: dict[tuple[str, ...], AgentContext] = field(default_factory=dict)  # `shown`'s, by the tools shown

    def shown(self, names: Sequence[str] | None) -> AgentContext:
        """This context as the model sees it in a run shown only the tools `names` (`AgentConfig.max_tools`, the
        state's `tools`): its registry, binding, instructions and schema tokens those tools' (the budget stays
        the whole toolset's). None, or names that leave out none of the tools: this context."""
        if not names:
            return self
        wanted = set(names)
        known = tuple(name for name in self.registry.names if name in wanted)
        if not known or len(known) == len(self.registry):
            return self
        narrowed = self.narrowed.get(known)
        if narrowed is None:
            registry = self.registry.subset(known)
            narrowed = replace(
                self,
                registry=registry,
                model=self.protocol.bind(self.chat_model, registry),
                system_prompt=_system_prompt(self.settings, self.protocol, registry),
                tool_tokens=self.counter.tools(self.protocol.tool_schemas(registry)),
                narrowed={},
            )
            self.narrowed[known] = narrowed
        return narrowed

    @classmethod
    def create(
        cls,
        settings: AgentConfig,
        registry: ToolRegistry,
        protocol: DecisionProtocol,
        chat_model: Any,
        summarizer: Any = None,
        state_schema: type[Any] = AgentState,
        approvals: frozenset[str] = frozenset(),
        guards: tuple[Guard, ...] | None = None,
        middleware: Middleware = NO_MIDDLEWARE,
    ) -> AgentContext:
        """The context of an agent; `guards` None: the built-in ones with `settings`' thresholds."""
        if guards is None:
            guards = default_guards(settings)
        system_prompt = _system_prompt(settings, protocol, registry)
        counter = TokenCounter(getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None))
        tool_tokens = counter.tools(protocol.tool_schemas(registry))
        bound = protocol.bind(chat_model, registry)
        keys = state_keys(state_schema)
        if not keys >= AGENT_STATE_KEYS:
            raise ConfigurationError(
                f"state_schema {state_schema!r} must extend AgentState (class MyState(AgentState): ...); it lacks "
                f"{', '.join(sorted(AGENT_STATE_KEYS - keys))}"
            )
        check_state_fields(((entry.name, entry.injection) for entry in registry), keys)
        # A tool's Command may write the state_schema's own keys and middleware's (TodoListMiddleware's todos),
        # never a guard's: a tool must not reset what guards it.
        guard_keys = {key for guard in guards if guard.state_schema for key in state_keys(guard.state_schema)}
        tool_keys = keys - AGENT_STATE_KEYS - guard_keys
        given = settings.context_token_budget
        ctx = cls(
            settings,
            registry,
            protocol,
            bound,
            system_prompt,
            summarizer,
            counter,
            tool_tokens,
            ContextBudget.of(given, 0, None),  # until the fixed part is measured, below
            keys,
            tool_keys,
            approvals,
            guards,
            fresh_budgets(guards, FRESH_BUDGETS),
            middleware,
            chat_model,
        )
        # The fixed part is measured on the prompt as `reinloop.prompt` lays it out for this context (imported
        # here: it imports this module).
        from reinloop.prompt import assemble, prompt_tokens

        fixed = prompt_tokens(ctx, assemble(ctx, "", []))
        return replace(ctx, budget=ContextBudget.of(given, fixed, input_window(chat_model)))


def _system_prompt(settings: AgentConfig, protocol: DecisionProtocol, registry: ToolRegistry) -> str | None:
    """The system prompt, then the protocol's instructions for `registry`'s tools; None when both are empty."""
    instructions = protocol.instructions(registry)
    return "\n\n".join(part for part in (settings.system_prompt, instructions) if part) or None
