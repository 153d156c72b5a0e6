"""The repeat guards: what becomes of an identical call, given what the recent ones came to.

An identical call is the same tool with the same canonical arguments (invalid arguments: as sent). The
window is the last `loop_window` decisions that called tools, the current one included; `call_window` in
state holds what became of each call of the earlier ones (observe records it), so a resumed run keeps it.
Each requested call is judged in order, by the first rule that applies:

1. The model was already refused for this call more than `repeats_after_feedback` times, or answered from
   cache for it more than `repeats_after_cache` times, within the dead-loop horizon (`horizon`): refused
   (`repeat_after_feedback`), and `dead_loop` ends the run.
2. Its latest outcome in the window is a success (it ran, or was answered from cache) and the tool is
   cacheable: answered from cache, that is with the earlier observation and a note; it does not run.
3. It is requested more than `max_repeats` times in the window (the seeds' dead-loop rule): refused with
   feedback (`repeated_call`); it does not run.
4. Otherwise it runs, or gets its validation error.

Answers from cache and refusals are the result messages of their calls; they are not tool runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from reinloop.config import AgentConfig
from reinloop.state import CallCheck, CallRecord, ErrorKind, ToolOutcome
from reinloop.tools.registry import ToolRegistry

__all__ = [
    "CACHED_RESULT_TEMPLATE",
    "DEAD_LOOP_TEMPLATE",
    "REFUSALS",
    "REPEATED_CALL_TEMPLATE",
    "RepeatGuard",
    "advance_window",
    "record",
]

CACHED_RESULT_PREFIX = "Not run again; you already have its result:\n"
CACHED_RESULT_TEMPLATE = CACHED_RESULT_PREFIX + "{result}"
REPEATED_CALL_TEMPLATE = (
    "Error: not run: this call came {count} times in {window} decisions. Change the arguments or the tool, or answer."
)
DEAD_LOOP_TEMPLATE = (
    "Error: not run. This exact {name!r} call was already {answered} {count} times in the last {window} "
    "decisions, and repeating it again ends the run as a dead loop."
)
# Rejections that are feedback on the repetition itself, not on the call.
REFUSALS: frozenset[ErrorKind] = frozenset({"repeated_call", "repeat_after_feedback"})


@dataclass
class RepeatGuard:
    """The rules above, over the earlier decisions of the window and the calls of this one judged so far."""

    settings: AgentConfig
    registry: ToolRegistry
    requests: Counter[str] = field(default_factory=Counter)
    # Feedback on each call within the horizon: its answers from cache, and its refusals.
    cached: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    # The latest success of each call (None after a failure), as the observation the model was sent.
    results: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def over(cls, window: list[list[CallRecord]], settings: AgentConfig, registry: ToolRegistry) -> RepeatGuard:
        guard = cls(settings, registry)
        # A window holds the current decision's place too: the earlier decisions are its last size - 1.
        for records in _earlier(window, settings.loop_window):
            for entry in records:
                guard._count(entry)
        # Repeats after feedback are counted over a longer window, or a dead loop could never trip once
        # repeats_after_feedback reaches loop_window - 1.
        for records in _earlier(window, horizon(settings)):
            guard.cached.update(entry["signature"] for entry in records if entry["outcome"] == "cached")
            guard.refused.update(entry["signature"] for entry in records if entry["outcome"] == "refused")
        return guard

    def judge(self, check: CallCheck) -> CallCheck:
        """`check` as the rules decide: unchanged (it runs, or keeps its validation error), answered from
        cache, or refused."""
        signature, window = check["signature"], self.settings.loop_window
        self.requests[signature] += 1
        if (dead := self._dead_loop(check)) is not None:
            self.refused[signature] += 1
            return dead
        if (cached := self._cached(check)) is not None:
            self.cached[signature] += 1
            return {**check, "cached": cached}
        if (count := self.requests[signature]) > self.settings.max_repeats:
            self.refused[signature] += 1
            message = REPEATED_CALL_TEMPLATE.format(count=count, window=window)
            return {**check, "error_kind": "repeated_call", "error": message}
        return check

    def _dead_loop(self, check: CallCheck) -> CallCheck | None:
        """`check` refused as a dead loop, if the model kept repeating it after feedback; else None."""
        signature, settings = check["signature"], self.settings
        if self.refused[signature] > settings.repeats_after_feedback:
            answered, count = "refused", self.refused[signature]
        elif self.cached[signature] > settings.repeats_after_cache:
            answered, count = "answered from cache", self.cached[signature]
        else:
            return None
        message = DEAD_LOOP_TEMPLATE.format(
            name=check["name"], answered=answered, count=count, window=horizon(settings)
        )
        return {**check, "error_kind": "repeat_after_feedback", "error": message}

    def _cached(self, check: CallCheck) -> str | None:
        entry = self.registry.get(check["name"])
        if check["error_kind"] is not None or entry is None or not entry.cacheable:
            return None
        return self.results.get(check["signature"])

    def _count(self, entry: CallRecord) -> None:
        signature = entry["signature"]
        self.requests[signature] += 1
        if entry["outcome"] in ("ok", "cached"):
            self.results[signature] = entry["result"]
        elif entry["outcome"] == "failed":
            self.results[signature] = None


def record(check: CallCheck, outcome: ToolOutcome | None) -> CallRecord:
    """What became of one judged call: `outcome` is its run's, None when it did not run."""
    signature = check["signature"]
    if check.get("cached") is not None:
        return CallRecord(signature=signature, outcome="cached", result=check.get("cached"))
    if check["error_kind"] in REFUSALS:
        return CallRecord(signature=signature, outcome="refused", result=None)
    if outcome is None or outcome["error_kind"] is not None:
        return CallRecord(signature=signature, outcome="failed", result=None)
    return CallRecord(signature=signature, outcome="ok", result=outcome["content"])


def horizon(settings: AgentConfig) -> int:
    """The decisions the dead-loop rule looks back over: loop_window, and one more per allowed repeat after
    feedback (of the larger allowance)."""
    return settings.loop_window + max(settings.repeats_after_feedback, settings.repeats_after_cache)


def _earlier(window: list[list[CallRecord]], size: int) -> list[list[CallRecord]]:
    return window[-(size - 1) :] if size > 1 else []


def advance_window(
    window: list[list[CallRecord]], records: list[CallRecord], settings: AgentConfig
) -> list[list[CallRecord]]:
    """The window after a decision whose calls came to `records`: the last `horizon` decisions."""
    return [*window, records][-horizon(settings) :]
