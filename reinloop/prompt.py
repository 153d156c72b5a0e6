"""Exactly what the model is sent for a decision, and keeping it within the context token budget."""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from reinloop.memory.window import window_entries
from reinloop.text import truncate

if TYPE_CHECKING:  # the context measures its fixed part with this module's layout
    from reinloop.context import AgentContext

__all__ = [
    "CACHE_POINT_KEY",
    "CUT_ARGS_KEY",
    "MEMORY_HEADER",
    "VOLATILE_KEY",
    "assemble",
    "fit_to_budget",
    "memory_note",
    "prompt_tokens",
]

MEMORY_HEADER = "Earlier steps (older than the messages below):"
# Marks, in a prompt message's additional_kwargs (which chat model integrations do not send for a user message):
# the message that ends the prefix a run keeps until its next compaction (the task, or the memory note after it),
# where a provider cache breakpoint goes (`reinloop.models.caching`); and the notes after the history (a
# reflection, a correction hint), which only this prompt has, so nothing after the history is cached.
CACHE_POINT_KEY = "reinloop_cache_point"
VOLATILE_KEY = "reinloop_volatile"
# Below this many characters a part of a message is not cut any further.
MIN_CUT_CHARS = 40
# Tool-call arguments cut for the prompt must stay a JSON object (providers refuse anything else): when
# cutting their strings is not enough, their cut JSON text is shown under this one key.
CUT_ARGS_KEY = "arguments_cut_for_length"
# Characters per token assumed when choosing how much of a part to keep (cl100k averages about 4).
CHARS_PER_TOKEN = 4


def memory_note(summaries: Sequence[str], pending: Sequence[str], memories: Sequence[str]) -> str | None:
    """The memory block shown after the task: summaries, not-yet-folded steps, recalled memories. All of them
    change only at a compaction (or when a run starts), so the note and the history after it are a prefix that
    a provider's cache can reuse from one decision to the next."""
    parts = []
    if summaries:
        parts.append("Summary:\n" + "\n".join(summaries))
    if pending:
        steps = "\n".join(f"- {line}" for line in pending)
        parts.append(f"Since the summary:\n{steps}" if summaries else steps)
    if memories:
        parts.append("Recalled from long-term memory:\n" + "\n".join(f"- {text}" for text in memories))
    return f"{MEMORY_HEADER}\n" + "\n".join(parts) if parts else None


def assemble(
    ctx: AgentContext,
    task: str,
    window: Sequence[BaseMessage],
    *,
    summaries: Sequence[str] = (),
    pending: Sequence[str] = (),
    memories: Sequence[str] = (),
    correction: str | None = None,
    reflection: str | None = None,
) -> list[BaseMessage]:
    """System prompt, task, memory block, the rendered window, then a pending reflection and correction hint
    (the only parts that change between compactions other than the history's new messages, so they come last)."""
    return _Draft.of(task, window, memory_note(summaries, pending, memories), [reflection, correction]).prompt(ctx)


def prompt_tokens(ctx: AgentContext, prompt: Sequence[BaseMessage]) -> int:
    """Tokens of the messages plus the tool schemas sent beside them."""
    return ctx.counter.messages(prompt) + ctx.tool_tokens


def fit_to_budget(
    ctx: AgentContext,
    task: str,
    window: Sequence[BaseMessage],
    *,
    summaries: Sequence[str] = (),
    pending: Sequence[str] = (),
    memories: Sequence[str] = (),
    correction: str | None = None,
    reflection: str | None = None,
) -> tuple[list[BaseMessage], int]:
    """What `assemble` gives, made to fit the context budget (`ctx.budget`), and its tokens.

    Only the copy sent to the model is cut, never state, and never the system prompt:
    1. The largest part of any other message is cut first, by what is over and at least by half: a text
       (list content is flattened to its text), the arguments of a past tool call (still a JSON object; the
       call keeps its name and id), or an over-long name. A part cut as far as it goes is left alone.
    2. If everything is cut and it still does not fit, the fewest oldest window entries that make it fit are
       dropped whole, so that a tool call never loses its result.
    3. What remains is sent as it is (build_agent refuses a budget that leaves the memory too little).
    Every cut makes the prompt strictly shorter or leaves a part alone for good, so it ends for any input.
    """
    budget = ctx.budget.tokens
    draft = _Draft.of(task, window, memory_note(summaries, pending, memories), [reflection, correction])
    prompt, tokens = draft.measure(ctx)
    if tokens <= budget:
        return prompt, tokens
    parts = sorted(draft.parts(), key=lambda part: part.size)
    while tokens > budget and parts:
        part = parts.pop()
        excess_chars = (tokens - budget) * CHARS_PER_TOKEN
        keep = max(MIN_CUT_CHARS, min(part.size // 2, part.size - excess_chars))
        if draft.cut(part, keep):
            prompt, tokens = draft.measure(ctx)
            bisect.insort(parts, part, key=lambda kept: kept.size)
    if tokens > budget and (entries := draft.entry_count()):
        # Dropping more entries never makes the prompt longer: bisect for the fewest that fit (or all).
        low, high = 1, entries
        while low < high:
            middle = (low + high) // 2
            if draft.without_oldest(middle).measure(ctx)[1] <= budget:
                high = middle
            else:
                low = middle + 1
        prompt, tokens = draft.without_oldest(high).measure(ctx)
    return prompt, tokens


@dataclass
class _Part:
    """One cuttable part of the draft: `kind` of `messages[index]`, or of its tool call number `call`."""

    index: int
    kind: Literal["text", "name", "call_name", "args"]
    original: Any  # the part as it was: a text, or the arguments object
    size: int  # its length in characters now (the arguments as JSON text)
    call: int | None = None


@dataclass
class _Draft:
    """The prompt before the system message, as a list the cutting edits: the task and memory note, the
    window (`messages[first:end]`), and the notes after it (a reflection, a correction hint)."""

    messages: list[BaseMessage]
    first: int
    end: int

    @classmethod
    def of(cls, task: str, window: Sequence[BaseMessage], note: str | None, after: Sequence[str | None]) -> _Draft:
        # The task stays for the whole run, the note until the next compaction: each ends a prefix to cache.
        head = [_marked(task, CACHE_POINT_KEY), *([_marked(note, CACHE_POINT_KEY)] if note else [])]
        tail = [_marked(text, VOLATILE_KEY) for text in after if text]
        return cls([*head, *window, *tail], len(head), len(head) + len(window))

    def measure(self, ctx: AgentContext) -> tuple[list[BaseMessage], int]:
        """The prompt this draft gives, and its tokens."""
        prompt = self.prompt(ctx)
        return prompt, prompt_tokens(ctx, prompt)

    def prompt(self, ctx: AgentContext) -> list[BaseMessage]:
        window = ctx.protocol.render(self.messages[self.first : self.end])
        system = [_system(ctx.system_prompt)] if ctx.system_prompt else []
        prompt = [*system, *self.messages[: self.first], *window, *self.messages[self.end :]]
        return ctx.protocol.finalize(prompt)

    def parts(self) -> list[_Part]:
        """Every part long enough to be cut."""
        found = []
        for index, message in enumerate(self.messages):
            found.append(_Part(index, "text", message.text, len(message.text)))
            if message.name:
                found.append(_Part(index, "name", message.name, len(message.name)))
            for number, call in enumerate(message.tool_calls if isinstance(message, AIMessage) else []):
                found.append(_Part(index, "call_name", call["name"], len(call["name"]), number))
                found.append(_Part(index, "args", call["args"], len(_json(call["args"])), number))
        return [part for part in found if part.size > MIN_CUT_CHARS]

    def cut(self, part: _Part, keep: int) -> bool:
        """Cut `part` to about `keep` characters (from its original, so the marker counts right); False, and
        nothing changed, when that would not make it shorter."""
        message = self.messages[part.index]
        if part.kind == "args":
            value: Any = _cut_args(part.original, keep)
            size = len(_json(value))
        else:
            value = truncate(part.original, keep)
            size = len(value)
        if size >= part.size:
            return False
        if part.kind == "text":
            update: dict[str, Any] = {"content": value}
        elif part.kind == "name":
            update = {"name": value}
        else:
            assert isinstance(message, AIMessage) and part.call is not None
            calls = [dict(call) for call in message.tool_calls]
            calls[part.call]["args" if part.kind == "args" else "name"] = value
            update = {"tool_calls": calls}
        self.messages[part.index] = message.model_copy(update=update)
        part.size = size
        return True

    def entry_count(self) -> int:
        return len(window_entries(self.messages[self.first : self.end]))

    def without_oldest(self, count: int) -> _Draft:
        """This draft without its `count` oldest window entries (a message and the tool results answering it)."""
        entries = window_entries(self.messages[self.first : self.end])
        dropped = sum(len(entry) for entry in entries[:count])
        kept = [*self.messages[: self.first], *self.messages[self.first + dropped :]]
        return _Draft(kept, self.first, self.end - dropped)


# The same text gives the same message object, round after round: the token counter then knows it by identity,
# and building a message (pydantic) is skipped. Like the window's messages, a prompt's messages are never
# changed in place (a cut copies its message).
MESSAGE_CACHE_SIZE = 256


@lru_cache(maxsize=MESSAGE_CACHE_SIZE)
def _marked(text: str, key: str) -> HumanMessage:
    return HumanMessage(text, additional_kwargs={key: True})


@lru_cache(maxsize=MESSAGE_CACHE_SIZE)
def _system(text: str) -> SystemMessage:
    return SystemMessage(text)


def _cut_args(args: Any, keep: int) -> dict[str, Any]:
    """A stand-in for tool-call arguments too long for the prompt, still a JSON object: each string cut to
    `keep` characters, or, when that is longer, the arguments' JSON text cut to `keep` under one key."""
    whole = {CUT_ARGS_KEY: truncate(_json(args), keep)}
    if not isinstance(args, dict):
        return whole
    strings_cut = _cut_strings(args, keep)
    return strings_cut if len(_json(strings_cut)) <= len(_json(whole)) else whole


def _cut_strings(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        return truncate(value, keep)
    if isinstance(value, dict):
        return {key: _cut_strings(item, keep) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_strings(item, keep) for item in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
