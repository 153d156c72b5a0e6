"""Provider prompt caching used, not only allowed: what a model call adds so that its provider reuses the prompt.

Reads the prompt's marks (`reinloop.prompt.CACHE_POINT_KEY`, `VOLATILE_KEY`) and the call's bound settings;
decides, by the chat model's class: Anthropic (langchain-anthropic's `ChatAnthropic`) gets `cache_control`
breakpoints in its messages, OpenAI (langchain-openai's `ChatOpenAI`, any base_url) a per-thread
`prompt_cache_key`; any other model is called as it was.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableBinding, RunnableConfig

from reinloop.prompt import CACHE_POINT_KEY, VOLATILE_KEY

__all__ = ["MAX_BREAKPOINTS", "bound_settings", "cache_key", "for_provider", "with_breakpoints"]

# Anthropic refuses a request with more cache breakpoints; a top-level `cache_control` (automatic caching, as
# AnthropicPromptCachingMiddleware sends it) takes one of them.
MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}
KEY_PREFIX = "reinloop-"


def cache_key(config: RunnableConfig | None) -> str | None:
    """The run's `prompt_cache_key`: the same for every call of a thread, different across threads (a digest, so
    that the thread id itself never leaves the machine and the key stays short); None without a thread."""
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None:
        return None
    return KEY_PREFIX + hashlib.sha256(str(thread).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def bound_settings(runnable: Any) -> Mapping[str, Any]:
    """What a bound model (`model.bind_tools(...)`, `model.bind(...)`) sends with each call: its tools and
    settings; nothing for any other runnable."""
    kwargs = getattr(runnable, "kwargs", None) if isinstance(runnable, RunnableBinding) else None
    return kwargs if isinstance(kwargs, Mapping) else {}


def for_provider(
    model: Any, messages: Sequence[BaseMessage], key: str | None, settings: Mapping[str, Any]
) -> tuple[list[BaseMessage], dict[str, Any]]:
    """`messages` and the keyword arguments to call `model` (the chat model, unbound) with, so that its provider
    reuses its prompt cache. `settings`: what the call sends besides (bound kwargs, a middleware's
    model_settings: tools, a top-level cache_control, the user's own prompt_cache_key), which is never
    overridden."""
    if _is_instance(model, "langchain_anthropic.chat_models", "ChatAnthropic"):
        return with_breakpoints(messages, settings, getattr(model, "model_kwargs", None) or {}), {}
    if _is_instance(model, "langchain_openai.chat_models.base", "ChatOpenAI") and key is not None:
        own = {**(getattr(model, "model_kwargs", None) or {}), **settings}
        return list(messages), {} if "prompt_cache_key" in own else {"prompt_cache_key": key}
    return list(messages), {}


def with_breakpoints(
    messages: Sequence[BaseMessage], settings: Mapping[str, Any], model_kwargs: Mapping[str, Any]
) -> list[BaseMessage]:
    """`messages` with Anthropic cache breakpoints, at most `MAX_BREAKPOINTS` with those already there:
    1. on the end of the history (the last message not marked volatile), unless a top-level `cache_control`
       (AnthropicPromptCachingMiddleware) already puts one on the last block;
    2. on each message marked as the end of a stable prefix, the latest first, as many as are left."""
    automatic = "cache_control" in settings or "cache_control" in model_kwargs
    left = MAX_BREAKPOINTS - _breakpoints(messages) - _tool_breakpoints(settings.get("tools")) - int(automatic)
    wanted: list[int] = []
    last = None if automatic else _history_end(messages)
    if last is not None:
        wanted.append(last)
    for index in reversed(range(len(messages))):
        if messages[index].additional_kwargs.get(CACHE_POINT_KEY) and _taggable(messages[index]):
            wanted.append(index)
    chosen = set(list(dict.fromkeys(wanted))[: max(left, 0)])
    return [_tagged(message) if index in chosen else message for index, message in enumerate(messages)]


def _history_end(messages: Sequence[BaseMessage]) -> int | None:
    """The last message before the volatile tail that can carry a breakpoint."""
    for index in reversed(range(len(messages))):
        message = messages[index]
        if not message.additional_kwargs.get(VOLATILE_KEY) and _taggable(message):
            return index
    return None


def _taggable(message: BaseMessage) -> bool:
    """Whether a breakpoint can go on `message`'s last text: it has text, and none of its blocks has one yet."""
    content = message.content
    if isinstance(content, str):
        return bool(content.strip())
    if any(isinstance(block, dict) and "cache_control" in block for block in content):
        return False
    return _last_text(content) is not None


def _last_text(content: list[Any]) -> int | None:
    for index in reversed(range(len(content))):
        block = content[index]
        if isinstance(block, str) and block.strip():
            return index
        if isinstance(block, dict) and block.get("type") == "text" and str(block.get("text", "")).strip():
            return index
    return None


def _tagged(message: BaseMessage) -> BaseMessage:
    """A copy of `message` with a breakpoint on its last text block (a tool result's is moved to the result by
    langchain-anthropic; an assistant message's tool calls follow its text)."""
    content = message.content
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
    else:
        blocks = list(content)
        index = _last_text(blocks)
        assert index is not None  # _taggable
        block = blocks[index]
        text_block = {"type": "text", "text": block} if isinstance(block, str) else block
        blocks[index] = {**text_block, "cache_control": EPHEMERAL}
    return message.model_copy(update={"content": blocks})


def _breakpoints(messages: Sequence[BaseMessage]) -> int:
    """Breakpoints the messages already carry (a middleware's on the system prompt, a user's own)."""
    return sum(
        1
        for message in messages
        if isinstance(message.content, list)
        for block in message.content
        if isinstance(block, dict) and "cache_control" in block
    )


def _tool_breakpoints(tools: Any) -> int:
    """Breakpoints on the tools sent with the call (AnthropicPromptCachingMiddleware tags the last one)."""
    if not isinstance(tools, list | tuple):
        return 0
    return sum(1 for tool in tools if _tool_tag(tool))


def _tool_tag(tool: Any) -> bool:
    if isinstance(tool, Mapping):
        return "cache_control" in tool or "cache_control" in (tool.get("extras") or {})
    return "cache_control" in (getattr(tool, "extras", None) or {})


def _is_instance(model: Any, module: str, name: str) -> bool:
    """Whether `model` is an instance of `module.name`, without importing it: an instance's class is loaded."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(model, cls)
