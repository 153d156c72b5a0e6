"""What every node may use besides state: the build-time dependencies of one compiled agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from reinloop.config import AgentConfig
from reinloop.protocols import DecisionProtocol
from reinloop.tools.registry import ToolRegistry

__all__ = ["AgentContext"]


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Fixed at build time and shared by the nodes; never checkpointed."""

    config: AgentConfig
    registry: ToolRegistry
    protocol: DecisionProtocol
    model: Runnable[Any, BaseMessage]  # the chat model as the protocol binds it
    system_prompt: str  # config.system_prompt plus the protocol's instructions

    @classmethod
    def create(
        cls, config: AgentConfig, registry: ToolRegistry, protocol: DecisionProtocol, chat_model: Any
    ) -> AgentContext:
        instructions = protocol.instructions(registry)
        system_prompt = f"{config.system_prompt}\n\n{instructions}" if instructions else config.system_prompt
        return cls(config, registry, protocol, protocol.bind(chat_model, registry), system_prompt)
