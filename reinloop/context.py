"""What every node may use besides state: the build-time dependencies of one compiled agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from reinloop.config import AgentConfig
from reinloop.memory.tokens import TokenCounter
from reinloop.protocols import DecisionProtocol
from reinloop.tools.registry import ToolRegistry

__all__ = ["AgentContext"]


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

    @classmethod
    def create(
        cls,
        settings: AgentConfig,
        registry: ToolRegistry,
        protocol: DecisionProtocol,
        chat_model: Any,
        summarizer: Any = None,
    ) -> AgentContext:
        instructions = protocol.instructions(registry)
        system_prompt = "\n\n".join(part for part in (settings.system_prompt, instructions) if part) or None
        counter = TokenCounter(getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None))
        tool_tokens = counter.tools(protocol.tool_schemas(registry))
        bound = protocol.bind(chat_model, registry)
        return cls(settings, registry, protocol, bound, system_prompt, summarizer, counter, tool_tokens)
