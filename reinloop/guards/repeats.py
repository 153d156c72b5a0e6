"""The repeat guards (`dead_loop`): what becomes of an identical call, given what the recent ones came to.

`DeadLoop` judges each requested call by the rules of `RepeatCounts`: it runs, is answered from cache (with
the earlier observation), or is refused as a repeat (`repeated_call`) or as a dead loop
(`repeat_after_feedback`). `dead_loop` ends the run after a dead-loop refusal, or when too many decisions in
a row brought nothing new. Its state, saved with the thread so a resumed run keeps it: `call_window` (what
became of the calls of the last decisions), `stalled` and `doubtful_calls` (the run's calls in doubt), which
its observe hook advances; its settings:
`loop_window`, `max_repeats`, `loop_key`, `repeats_after_feedback`, `repeats_after_cache`, `max_stalled`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

from reinloop.config import LoopKey
from reinloop.errors import ConfigurationError
from reinloop.guards.base import QUOTE_CHARS, Guard, Round, Stop, at_least, called
from reinloop.state import AgentState, CallCheck, CallRecord, ErrorKind, RunState, ToolOutcome
from reinloop.text import counted, truncate

__all__ = [
    "DEAD_LOOP_REPEATS_TEMPLATE",
    "DEAD_LOOP_STALLED_TEMPLATE",
    "DEAD_LOOP_TEMPLATE",
    "DEAD_LOOP_TOOL_TEMPLATE",
    "IN_DOUBT_REPEAT_TEMPLATE",
    "MODEL_MISTAKES",
    "REFUSALS",
    "REPEATED_CALL_TEMPLATE",
    "REPEATED_TOOL_TEMPLATE",
    "DeadLoop",
    "RepeatCounts",
    "call_text",
    "record",
]

REPEATED_CALL_TEMPLATE = (
    "Error: not run: this call came {count} times in {window} decisions. Change the arguments or the tool, or answer."
)
REPEATED_TOOL_TEMPLATE = (
    "Error: not run: {name!r} was called {count} times in {window} decisions. Use another tool, or answer."
)
IN_DOUBT_REPEAT_TEMPLATE = (
    "Error: not run: an identical {name!r} call before it may or may not have had its effect, and {name!r} is "
    "not safe to run twice. Check whether it took effect (with a read-only tool, or ask the user), or answer."
)
DEAD_LOOP_TEMPLATE = (
    "Error: not run. This exact {name!r} call was already {answered} {count} times in the last {window} "
    "decisions, and repeating it again ends the run as a dead loop."
)
DEAD_LOOP_TOOL_TEMPLATE = (
    "Error: not run. Calls of {name!r} were already {answered} {count} times in the last {window} decisions, "
    "and calling it again ends the run as a dead loop."
)
# Why the run stopped: rule 1 refused a call, or decisions in a row brought nothing new.
DEAD_LOOP_REPEATS_TEMPLATE = (
    "{repeats} kept coming after being refused more than {times_after_feedback}, or answered from cache more "
    "than {times_after_cache}, within {horizon} decisions: {repeated}"
)
DEAD_LOOP_STALLED_TEMPLATE = (
    "{count} decisions in a row brought nothing new: every call was answered from a result the agent already had, "
    "or refused as a repeat: {repeated}"
)
# What a re-plan turn that replaces the stop says happened.
REPLAN = "you keep making calls whose results you already have, or that were refused:"
# The feedback of rule 3 and of rule 1, by what the repeats are counted by (AgentConfig.loop_key).
_TEMPLATES: dict[LoopKey, tuple[str, str]] = {
    "call": (REPEATED_CALL_TEMPLATE, DEAD_LOOP_TEMPLATE),
    "tool": (REPEATED_TOOL_TEMPLATE, DEAD_LOOP_TOOL_TEMPLATE),
}
# Rejections that are feedback on the repetition itself, not on the call.
REFUSALS: frozenset[ErrorKind] = frozenset({"repeated_call", "repeat_after_feedback"})
# The model's mistakes, caught before any tool runs: recorded as "invalid", never judged or counted as repeats,
# and no errors of the streak (an unreadable reply neither).
MODEL_MISTAKES: frozenset[ErrorKind] = frozenset({"unknown_tool", "invalid_args"})


@dataclass
class RepeatCounts:
    """What becomes of each call of a decision, over the earlier decisions of the window and the calls of this
    one judged so far.

    An identical call is the same tool with the same canonical arguments. The dead-loop horizon is the last
    `loop_window` + max(`repeats_after_feedback`, `repeats_after_cache`) decisions that called tools, the current
    one included. A call that failed validation is not judged and counts nowhere: it keeps its validation error,
    which says what to fix. Each other call is judged in order, by the first rule that applies:

    1. The model was already refused for this call more than `repeats_after_feedback` times, or answered from
       cache for it more than `repeats_after_cache` times, within the horizon: refused
       (`repeat_after_feedback`), and `dead_loop` ends the run.
    2. Its latest outcome within the horizon is a success (it ran, or was answered from cache) and the tool is
       cacheable: answered from cache, that is with the earlier observation and a note; it does not run.
    3. An identical call earlier in the run has an outcome in doubt (it may have had its effect, and its tool
       is declared not idempotent): refused (`repeated_call`), with a note to check whether it took effect.
    4. It is requested more than `max_repeats` times within the last `loop_window` decisions (the seeds'
       dead-loop rule), and its latest outcome is a success (keyed on the tool: whatever the outcomes): refused
       with feedback (`repeated_call`); it does not run. A call whose latest run failed runs again: the model's
       retry of a fault that may pass (one that lasts is the error streak's to stop).
    5. Otherwise it runs.

    Answers from cache and refusals are the result messages of their calls; they are not tool runs (a refusal
    of rule 1 keeps the call's result known in the record, so the refusals cannot make it run again).
    """

    guard: DeadLoop
    # Requests within the window, by loop key (the call's signature, or its tool: `AgentConfig.loop_key`).
    requests: Counter[str] = field(default_factory=Counter)
    # Feedback within the horizon, by loop key: answers from cache, and refusals.
    cached: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    # The latest success of each call, by signature (None after a failure), as the observation the model was sent.
    results: dict[str, str | None] = field(default_factory=dict)
    # The run's calls whose outcome is in doubt (`doubtful_calls`), by signature.
    in_doubt: set[str] = field(default_factory=set)

    @classmethod
    def over(cls, window: list[list[CallRecord]], guard: DeadLoop, doubtful: Iterable[str] = ()) -> RepeatCounts:
        counts = cls(guard, in_doubt=set(doubtful))
        # A window holds the current decision's place too: the earlier decisions are its last size - 1.
        for records in _earlier(window, guard.loop_window):
            for entry in records:
                if entry["outcome"] != "invalid":
                    counts.requests[counts._record_key(entry)] += 1
        # Results and repeats after feedback are kept over the longer horizon: a call whose result is known is
        # answered from cache whatever order the calls come in, and a dead loop can trip even once
        # repeats_after_feedback reaches loop_window - 1.
        tallies = {"cached": counts.cached, "refused": counts.refused}
        for records in _earlier(window, guard.horizon):
            for entry in records:
                counts._learn(entry)
                if (tally := tallies.get(entry["outcome"])) is not None:
                    tally[counts._record_key(entry)] += 1
        return counts

    def judge(self, check: CallCheck) -> CallCheck:
        """`check` as the rules decide: unchanged (it runs, or keeps its validation error), answered from
        cache, or refused."""
        if check["error_kind"] is not None:
            return check
        key, window = self._key(check["name"], check["signature"]), self.guard.loop_window
        self.requests[key] += 1
        cached = self._cached(check)
        if (dead := self._dead_loop(check, key)) is not None:
            self.refused[key] += 1
            return {**dead, "known": cached}
        if cached is not None:
            self.cached[key] += 1
            return {**check, "cached": cached}
        if check["signature"] in self.in_doubt:
            self.refused[key] += 1
            message = IN_DOUBT_REPEAT_TEMPLATE.format(name=check["name"])
            return {**check, "error_kind": "repeated_call", "error": message}
        succeeded = self.guard.loop_key == "tool" or self.results.get(check["signature"]) is not None
        if (count := self.requests[key]) > self.guard.max_repeats and succeeded:
            self.refused[key] += 1
            template = _TEMPLATES[self.guard.loop_key][0]
            message = template.format(name=check["name"], count=count, window=window)
            return {**check, "error_kind": "repeated_call", "error": message}
        return check

    def _dead_loop(self, check: CallCheck, key: str) -> CallCheck | None:
        """`check` refused as a dead loop, if the model kept repeating it (by `key`) after feedback; else None."""
        guard = self.guard
        if self.refused[key] > guard.repeats_after_feedback:
            answered, count = "refused", self.refused[key]
        elif self.cached[key] > guard.repeats_after_cache:
            answered, count = "answered from cache", self.cached[key]
        else:
            return None
        message = _TEMPLATES[guard.loop_key][1].format(
            name=check["name"], answered=answered, count=count, window=guard.horizon
        )
        return {**check, "error_kind": "repeat_after_feedback", "error": message}

    def _cached(self, check: CallCheck) -> str | None:
        if not check.get("cacheable", False):
            return None
        return self.results.get(check["signature"])

    def _key(self, name: str, signature: str) -> str:
        """What a call is counted by: its signature, or its tool's name."""
        return name if self.guard.loop_key == "tool" else signature

    def _record_key(self, entry: CallRecord) -> str:
        """What a recorded call is counted by. A record saved before records named their tool counts towards its
        call only, never towards a tool."""
        name = entry.get("name")
        return self._key(name, entry["signature"]) if name is not None else entry["signature"]

    def _learn(self, entry: CallRecord) -> None:
        signature, outcome = entry["signature"], entry["outcome"]
        if outcome == "refused":
            if entry["result"] is not None:  # a refused repeat of a call whose result was known: still known
                self.results[signature] = entry["result"]
        elif outcome in ("ok", "cached"):
            self.results[signature] = entry["result"]
        elif outcome == "failed":
            self.results[signature] = None


def record(check: CallCheck, outcome: ToolOutcome | None) -> CallRecord:
    """What became of one judged call: `outcome` is its run's, None when it did not run."""
    signature, name = check["signature"], check["name"]
    if check.get("cached") is not None:
        return CallRecord(signature=signature, name=name, outcome="cached", result=check.get("cached"))
    if check["error_kind"] in REFUSALS:
        return CallRecord(signature=signature, name=name, outcome="refused", result=check.get("known"))
    if check["error_kind"] in MODEL_MISTAKES:
        return CallRecord(signature=signature, name=name, outcome="invalid", result=None)
    if outcome is None or outcome["error_kind"] is not None:
        return CallRecord(signature=signature, name=name, outcome="failed", result=None)
    return CallRecord(signature=signature, name=name, outcome="ok", result=outcome["content"])


def _earlier(window: list[list[CallRecord]], size: int) -> list[list[CallRecord]]:
    return window[-(size - 1) :] if size > 1 else []


class DeadLoop(Guard):
    """The repeat guards (`RepeatCounts`), and the `dead_loop` stop.

    A decision whose every call was answered from cache or refused brings nothing new: `stalled` counts such
    decisions in a row (a decision with any other outcome ends the count; an unreadable reply leaves it).
    `dead_loop` ends the run in a round in which rule 1 refused a call, or when more than `max_stalled` decisions
    in a row stalled, whatever order the repeated calls came in (unless a re-plan turn is granted; it does not
    clear `call_window`, so a repeat after it trips again).

    `loop_key` says what the counts of rules 1 and 3 are kept by: "call" (the default), the identical call;
    "tool", the tool whatever its arguments (seed 004's dead-loop rule: the same tool more than twice in three
    rounds). Keyed on the tool, rule 2 still needs the identical call (another call of the tool has no result to
    give back), but its answers from cache, like every request and refusal, count towards the tool: three
    different calculations in a row are refused at the third with the defaults, and a model that keeps calling
    a tool after it was refused or answered from cache ends the run as `dead_loop`, whatever the arguments.
    """

    name = "dead_loop"
    exit_code = 5
    initial: ClassVar = {"call_window": [], "stalled": 0, "doubtful_calls": []}

    def __init__(
        self,
        loop_window: int = 3,
        max_repeats: int = 2,
        loop_key: LoopKey = "call",
        repeats_after_feedback: int = 5,
        repeats_after_cache: int = 5,
        max_stalled: int = 2,
    ) -> None:
        at_least(
            "DeadLoop",
            loop_window=(loop_window, 1),
            max_repeats=(max_repeats, 1),
            repeats_after_feedback=(repeats_after_feedback, 0),
            repeats_after_cache=(repeats_after_cache, 0),
            max_stalled=(max_stalled, 0),
        )
        if loop_key not in get_args(LoopKey):
            raise ConfigurationError(f"DeadLoop's loop_key is one of {get_args(LoopKey)}, got {loop_key!r}")
        self.loop_window, self.max_repeats, self.loop_key = loop_window, max_repeats, loop_key
        self.repeats_after_feedback, self.repeats_after_cache = repeats_after_feedback, repeats_after_cache
        self.max_stalled = max_stalled
        # The decisions the dead-loop rule looks back over: loop_window, and one more per allowed repeat after
        # feedback (of the larger allowance).
        self.horizon = loop_window + max(repeats_after_feedback, repeats_after_cache)

    def judge(self, calls: list[CallCheck], state: AgentState) -> list[CallCheck]:
        counts = RepeatCounts.over(state.get("call_window") or [], self, state.get("doubtful_calls") or [])
        return [counts.judge(call) for call in calls]

    def observe(self, round: Round, state: AgentState) -> dict[str, Any]:
        if round.parse_error is not None or not round.calls:
            return {}
        records = [record(seen.check, seen.outcome) for seen in round.calls]
        stalled = state.get("stalled", 0) + 1 if all(_repeat(seen.check) for seen in round.calls) else 0
        # The window keeps the last `horizon` decisions; the calls in doubt are kept for the whole run.
        update: dict[str, Any] = {
            "call_window": [*(state.get("call_window") or []), records][-self.horizon :],
            "stalled": stalled,
        }
        if doubtful := [
            seen.check["signature"] for seen in round.calls if seen.outcome and seen.outcome.get("in_doubt")
        ]:
            update["doubtful_calls"] = [*(state.get("doubtful_calls") or []), *doubtful]
        return update

    def check(self, state: RunState) -> Stop | None:
        # Rule 1 refused a call this round, before it ran; or decisions in a row brought nothing new.
        dead, stalled = _refused_as_dead(state), state.get("stalled", 0)
        if not dead and stalled <= self.max_stalled:
            return None
        checks = state.get("checks", [])
        repeated = ", ".join(call_text(check) for check in checks if _repeat(check))
        if dead:
            why = DEAD_LOOP_REPEATS_TEMPLATE.format(
                repeats="Calls of the same tool" if self.loop_key == "tool" else "The same call",
                times_after_feedback=counted(self.repeats_after_feedback, "time"),
                times_after_cache=counted(self.repeats_after_cache, "time"),
                horizon=self.horizon,
                repeated=repeated,
            )
        else:
            why = DEAD_LOOP_STALLED_TEMPLATE.format(count=stalled, repeated=repeated)
        failed = [
            f"{call_text(check)}: " + ("you already have its result" if check["error"] is None else check["error"])
            for check in checks
            if check["error"] or check.get("cached") is not None
        ]
        return Stop(f"Stopped: a dead loop. {why}", replan=REPLAN, failed=failed)


def _repeat(check: CallCheck) -> bool:
    """The call was answered from what the agent already knows: from cache, or refused as a repeat."""
    return check.get("cached") is not None or check["error_kind"] in REFUSALS


def _refused_as_dead(state: AgentState) -> bool:
    return any(check["error_kind"] == "repeat_after_feedback" for check in state.get("checks", []))


def call_text(check: CallCheck) -> str:
    """A call as the model wrote it, `name({arguments})`, cut to a quotable length."""
    return truncate(called(check), QUOTE_CHARS)
