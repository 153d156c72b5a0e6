"""Native tool calls for a model that writes its calls as text: what the peers need to run on the embedded model.

create_agent binds the tools to its model and reads `tool_calls` from the replies; the embedded model has no
tool-calling API and writes its decisions in a text protocol (json, react, call_tool). `WrittenToolCalls`
gives it one: its `bind_tools` returns a runnable that sends the model the same prompt reinloop sends it in
that protocol (the tool list in the system prompt, each call and result shown back as the model writes
them, the protocol's final shape), and reads the reply with the same parser, as native calls: a call, an
answer, or, for a reply the parser cannot read, a malformed (invalid) call, which create_agent and its
middleware handle as they do a provider's. So every agent of the real-model benchmark meets the same model
through the same format, and only the loops differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool

from reinloop.memory.tokens import TokenCounter
from reinloop.protocols import WrittenProtocol, read_reply
from reinloop.protocols.interface import new_call_id
from reinloop.tools.registry import ToolRegistry

__all__ = ["WrittenToolCalls"]

_COUNTER = TokenCounter()


class WrittenToolCalls(BaseChatModel):
    """`model`, which writes its decisions in the text protocol `protocol`, with native tool calls."""

    model: BaseChatModel
    protocol: Any  # a WrittenProtocol
    # The most tokens one prompt may count, counted as reinloop counts its own (`TokenCounter`, the prompt as
    # sent): the oldest turns after the task are left out until it fits, as reinloop's prompt drops the oldest
    # entries of its window. None: no limit.
    context_token_budget: int | None = None

    @property
    def _llm_type(self) -> str:
        return f"written-tool-calls-{self.protocol.name}"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any) -> Runnable[Any, Any]:
        registry = ToolRegistry([tool for tool in tools if isinstance(tool, BaseTool)])
        protocol: WrittenProtocol = self.protocol
        bound = protocol.bind(self.model, registry)  # as reinloop binds it: the embedded model's grammar too

        def decide(messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
            # The model call is the only one the callbacks see: the prompt as the model gets it.
            reply = bound.invoke(self.prompt(messages, registry), config)
            decision, stored = read_reply(protocol, reply, registry)
            if decision["kind"] == "unparsable" or stored is None:
                bad = {"type": "invalid_tool_call", "id": new_call_id(), "name": None, "args": decision["raw"]}
                return AIMessage(reply.text, invalid_tool_calls=[{**bad, "error": decision["error"]}])
            return stored

        return RunnableLambda(decide, name=self._llm_type)

    def prompt(self, messages: Sequence[BaseMessage], registry: ToolRegistry) -> list[BaseMessage]:
        """`messages` (create_agent's, native calls and tool messages) as the protocol sends them: the system
        prompt with the protocol's instructions, the conversation rendered in its format, its final shape."""
        protocol: WrittenProtocol = self.protocol
        system = "\n\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        instructions = "\n\n".join(part for part in (system, protocol.instructions(registry)) if part)
        # A reply the parser could not read is shown back as the model wrote it.
        rest = [
            AIMessage(m.text, name="unreadable") if isinstance(m, AIMessage) and m.invalid_tool_calls else m
            for m in messages
            if not isinstance(m, SystemMessage)
        ]
        prompt = protocol.finalize([SystemMessage(instructions), *protocol.render(rest)])
        while self.context_token_budget is not None and len(rest) > 1:
            if _COUNTER.messages(prompt) <= self.context_token_budget:
                break
            rest = [rest[0], *_without_oldest_turn(rest[1:])]
            prompt = protocol.finalize([SystemMessage(instructions), *protocol.render(rest)])
        return prompt

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("WrittenToolCalls is called through bind_tools, as create_agent calls it")


def _without_oldest_turn(turns: Sequence[BaseMessage]) -> list[BaseMessage]:
    """`turns` without the first and the observations answering it (a tool result never stays without its call)."""
    kept = list(turns[1:])
    while kept and isinstance(kept[0], ToolMessage):
        kept.pop(0)
    return kept
