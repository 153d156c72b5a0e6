"""A strict scripted chat model for tests, notebooks and docs, with helpers to write its replies.

Queue mode replays a list of replies and fails when called once more; function mode computes each reply
from the messages the model was sent. Every call is recorded, so tests can assert on exactly what the
model saw, and `bind_tools` records the tools it was given.

    model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2}), "The sum is 3."])
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

from reinloop.protocols import new_call_id
from reinloop.text import truncate

__all__ = [
    "RecordedCall",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "bind_as_provider",
    "cut_reply",
    "json_action",
    "parallel_calls",
    "tool_call",
]

Reply = AIMessage | str | Exception


class ScriptExhaustedError(RuntimeError):
    """The scripted model was called more often than its script allows: the agent made an extra call."""


@dataclass(frozen=True)
class RecordedCall:
    """One call of the scripted model: the messages it was sent and the tools bound at the time."""

    messages: list[BaseMessage]
    tools: list[dict[str, Any]]


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script.

    `replies`: a queue of AIMessages, strings (text replies) or exceptions (raised). `respond`: instead, a
    function from the sent messages to a reply; `max_calls` then bounds how often it may be called.
    `latency_s`: how long each call waits before it replies (asleep on the event loop under ainvoke), as a
    model server would; `record=False` keeps no calls (a long benchmark's memory).
    """

    replies: list[Any] = Field(default_factory=list, repr=False)
    respond: Callable[[list[BaseMessage]], Reply] | None = None
    max_calls: int | None = None
    latency_s: float = 0.0
    record: bool = True

    _calls: list[RecordedCall] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)
    _count: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "reinloop-scripted"

    @property
    def calls(self) -> list[RecordedCall]:
        """Every call so far, oldest first."""
        return list(self._calls)

    @property
    def remaining(self) -> int:
        """Scripted replies not yet used (queue mode)."""
        return len(self.replies) - self._position

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self._reply(messages, **kwargs)

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> ChatResult:
        self._count += 1
        if self.record:
            self._calls.append(RecordedCall(list(messages), list(kwargs.get("tools") or [])))
        reply = self._next_reply(messages)
        if isinstance(reply, Exception):
            raise reply
        message = AIMessage(content=reply) if isinstance(reply, str) else reply
        # A fresh id each time: the same scripted message may be replayed, and the window keys on ids.
        message = message.model_copy(update={"id": f"scripted-{uuid.uuid4().hex}"})
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # The same script, played on the event loop (LangChain's default would play it in a worker thread).
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._reply(messages, **kwargs)

    def _next_reply(self, messages: list[BaseMessage]) -> Reply:
        count = self._count
        if self.respond is not None:
            if self.max_calls is not None and count > self.max_calls:
                raise ScriptExhaustedError(f"called {count} times, but max_calls={self.max_calls}")
            return self.respond(list(messages))
        if self._position >= len(self.replies):
            raise ScriptExhaustedError(
                f"called {count} times, but the script has only {len(self.replies)} replies; "
                f"the last messages sent were: {[truncate(m.text, 80) for m in messages[-3:]]}"
            )
        reply: AIMessage | str | Exception = self.replies[self._position]
        self._position += 1
        return reply

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[Any, AIMessage]:
        return bind_as_provider(self, tools, tool_choice=tool_choice, **kwargs)


def bind_as_provider(
    model: BaseChatModel, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
) -> Runnable[Any, AIMessage]:
    """`model` with `tools` bound as an OpenAI-style provider's chat model binds them: each call is given
    their schemas (and `tool_choice`) as the `tools` keyword, as a provider sends them with every request."""
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    return model.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)


def tool_call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None, content: str = "") -> AIMessage:
    """A reply that calls one tool."""
    return parallel_calls([(name, args or {})], ids=[id] if id else None, content=content)


def parallel_calls(
    calls: Sequence[tuple[str, dict[str, Any]]], *, ids: Sequence[str] | None = None, content: str = ""
) -> AIMessage:
    """A reply that calls several tools at once."""
    ids = list(ids) if ids else [new_call_id() for _ in calls]
    return AIMessage(
        content=content,
        tool_calls=[
            {"name": name, "args": args, "id": call_id, "type": "tool_call"}
            for (name, args), call_id in zip(calls, ids, strict=True)
        ],
    )


def cut_reply(reply: AIMessage | str) -> AIMessage:
    """`reply` as an OpenAI-style provider returns a reply its output limit cut (finish_reason "length"): the
    agent never acts on one, whatever it holds."""
    message = AIMessage(content=reply) if isinstance(reply, str) else reply
    metadata = {**message.response_metadata, "finish_reason": "length"}
    return message.model_copy(update={"response_metadata": metadata})


def json_action(action: str, action_input: Any = None, *, thought: str = "") -> str:
    """A reply in the json protocol: ``{"thought", "action", "action_input"}``."""
    return json.dumps({"thought": thought, "action": action, "action_input": action_input})
