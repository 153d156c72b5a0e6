"""The protocol interface: what a decision protocol implements (`DecisionProtocol`), and how decide reads every
reply through one (`read_reply`): a reply cut at the output limit (`cut_off`) is unparsable, never handed to
the protocol.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from reinloop.state import Decision, unparsable
from reinloop.text import truncate
from reinloop.tools.registry import ToolRegistry

# Where LangChain chat models report why a reply stopped (`response_metadata`), and the reasons that mean an
# output limit cut it, lower-cased: OpenAI and OpenAI-compatible servers (llama.cpp, vLLM) finish_reason
# "length"; Anthropic stop_reason "max_tokens" (or "model_context_window_exceeded"); Google finish_reason
# MAX_TOKENS (an enum member); Ollama done_reason "length"; Bedrock Converse stopReason "max_tokens"; OpenAI's
# Responses API incomplete_details.reason "max_output_tokens".
STOP_REASON_KEYS = ("finish_reason", "stop_reason", "stopReason", "done_reason")
CUT_STOP_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_context_window_exceeded"})
# The error of a reply cut at the output limit: the retry hint and the error note say it, and ask for less.
CUT_REPLY_TEMPLATE = (
    "it was cut off by the output limit{after}, unfinished, so none of it was used; write a shorter reply: one "
    "decision, with a sentence or two of reasoning at most"
)
# A cut reply is quoted back this far: its start shows the model what it was writing; more of a runaway would
# only lengthen the retry's prompt.
CUT_REPLY_QUOTED_CHARS = 300


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class DecisionProtocol(ABC):
    """How a model states its decisions. Subclass it to support another reply format."""

    name: ClassVar[str]
    # What a correct reply looks like, for the correction hint after an unparsable reply.
    expected_format: ClassVar[str]

    @abstractmethod
    def bind(self, model: BaseChatModel, registry: ToolRegistry) -> Runnable[Any, BaseMessage]:
        """The runnable `decide` calls with the prompt messages."""

    @abstractmethod
    def instructions(self, registry: ToolRegistry) -> str:
        """Text appended to the system prompt (empty when the model API carries the tools)."""

    @abstractmethod
    def render(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The stored window as this protocol shows it to the model."""

    @abstractmethod
    def parse(self, reply: BaseMessage, registry: ToolRegistry) -> tuple[Decision, AIMessage | None]:
        """The decision in `reply`, and the message to store in the window (None when unparsable). decide
        never passes a reply that an output limit cut (`read_reply`)."""

    def finalize(self, prompt: list[BaseMessage]) -> list[BaseMessage]:
        """The assembled prompt in the shape this protocol sends it (by default, as it is)."""
        return prompt

    def format_answer(self, answer: str, thought: str = "") -> str:
        """A final answer as the model writes it (by default, the answer alone): how a final answer of an
        earlier run on the thread is shown back, and how worked examples write one."""
        return answer

    def tool_schemas(self, registry: ToolRegistry) -> list[dict[str, Any]]:
        """The tool schemas `bind` sends beside the messages, counted in every prompt's tokens. By default
        none: override it when `bind` gives the model API the tools (a text protocol describes them in
        `instructions`, which are counted with the system prompt)."""
        return []


def read_reply(
    protocol: DecisionProtocol, reply: BaseMessage, registry: ToolRegistry
) -> tuple[Decision, AIMessage | None]:
    """The decision in `reply` as `protocol` reads it, unless an output limit cut the reply (`cut_off`): then it
    is unparsable whatever it holds, since a call in it that looks complete may have lost the rest of its
    arguments, and the retry asks for a shorter reply."""
    if cut_off(reply) is None:
        return protocol.parse(reply, registry)
    reported = (getattr(reply, "usage_metadata", None) or {}).get("output_tokens")
    after = f" at {reported} tokens" if isinstance(reported, int) and reported > 0 else ""
    return unparsable(_written(reply), CUT_REPLY_TEMPLATE.format(after=after)), None


def cut_off(reply: BaseMessage) -> str | None:
    """Why an output limit cut `reply`, as its provider reports it in lower case ("length", "max_tokens"), or
    None when the reply ended on its own or says nothing about how it ended."""
    metadata = reply.response_metadata or {}
    reasons = [metadata.get(key) for key in STOP_REASON_KEYS]
    if isinstance(details := metadata.get("incomplete_details"), dict):
        reasons.append(details.get("reason"))
    # Google's is an enum member (FinishReason.MAX_TOKENS), the others strings.
    names = (str(getattr(reason, "name", reason)).rsplit(".", 1)[-1].lower() for reason in reasons if reason)
    return next((name for name in names if name in CUT_STOP_REASONS), None)


def _written(reply: BaseMessage) -> str:
    """The start of what a cut reply holds, its text then its calls, cut to CUT_REPLY_QUOTED_CHARS."""
    parts: list[str] = [reply.text]
    for call in [*getattr(reply, "tool_calls", []), *getattr(reply, "invalid_tool_calls", [])]:
        args = call.get("args")
        try:
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
        except (RecursionError, ValueError):  # nested too deeply to write
            args = "…"
        parts.append(f"{call.get('name')}({truncate(args, CUT_REPLY_QUOTED_CHARS)})")
    return truncate("\n".join(part for part in parts if part), CUT_REPLY_QUOTED_CHARS)
