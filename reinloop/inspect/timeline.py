"""A thread's checkpoint history as a timeline of rounds, for `reinloop inspect`: pure functions of the state
snapshots (oldest first) that `get_state_history` reads.

Each snapshot's tasks hold what their node wrote (`PregelTask.result`); the next snapshot holds the state the
writes made. Reads the decision and its calls (decide), their validation and reviews (validate_args), their
results and in-place retries (execute_tool, observe), the guards' events (answers from cache, refusals,
circuits, reflection and re-plan turns) and the finish (check_finish, circuit_break); and the path the run
took through the graph, and where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START
from langgraph.types import StateSnapshot

from reinloop.graph import (
    CHECK_FINISH,
    CIRCUIT_BREAK,
    COMPRESS_MEMORY,
    DECIDE,
    EXECUTE_TOOL,
    OBSERVE,
    VALIDATE_ARGS,
)
from reinloop.nodes.circuit_break import EXPLANATION_KEY

__all__ = ["END", "UPDATE", "Call", "Event", "EventKind", "Round", "Step", "Timeline", "steps", "timeline"]

# The source LangGraph records for a checkpoint written by `update_state`: a resume's fresh budget and hint.
UPDATE = "update"

EventKind = Literal[
    "task",  # a new task on the thread
    "resumed",  # a resume after a break: a fresh budget, and the operator's hint
    "answer",  # the model's final answer
    "unparsable",  # a reply that could not be read as a decision
    "retry",  # the unparsable reply is asked again, with a correction hint (in place)
    "retried",  # a tool call that ran more than once (in-place retries)
    "cached",  # a call answered from cache, not run again
    "refused",  # a call refused by a guard or rejected by a person
    "circuit",  # a tool's circuit opened
    "reflection",  # a reflection or re-plan turn: the next decision is shown what failed
    "memory",  # entries folded out of the window into a summary
    "stop",  # a middleware hook ended the run
    "finish",  # how the run ended
]

# The validation outcomes that refuse a call before it runs (`reinloop.state.ErrorKind`).
REFUSALS = frozenset({"repeated_call", "repeat_after_feedback", "over_budget", "rejected", "blocked", "circuit_open"})


@dataclass
class Call:
    """One tool call of a decision: its arguments, what validation made of it, and its result."""

    call_id: str
    name: str
    args: str  # the arguments as JSON
    # "ok", "cached", "waiting" (for an approval), or the error kind of its validation or of its run
    outcome: str = "requested"
    note: str | None = None  # why validation refused it
    review: str | None = None  # a person's review: approved, edited or rejected
    result: str | None = None  # the observation the model got
    failed: bool = False
    attempts: int = 0  # how often the tool ran for it, retries included


@dataclass(frozen=True)
class Event:
    kind: EventKind
    text: str
    reason: str | None = None  # a finish's reason


@dataclass
class Round:
    """One decision round: what the model said and called, and what happened to it."""

    number: int
    text: str = ""  # the decision's text
    calls: list[Call] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    tokens: int = 0  # the model's tokens in the round (decisions and summaries)
    cached: int = 0  # of its prompt tokens, those the provider read from its cache
    closed: bool = False  # check_finish ended it


@dataclass
class Timeline:
    """A thread's rounds, the events between them, and its path through the graph."""

    rounds: list[Round] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)  # the nodes the run went through
    edges: set[tuple[str, str]] = field(default_factory=set)  # and the edges, as (source, target)
    stopped_at: str | None = None  # the node it waits at or stopped in; END once answered


@dataclass(frozen=True)
class Step:
    """One node's run: what it wrote, the state before it and the state after it (the next snapshot's values)."""

    node: str
    writes: Mapping[str, Any]
    after: Mapping[str, Any]
    before: Mapping[str, Any]
    waiting: frozenset[str] = frozenset()  # the calls it waits to have approved (by call id), at its interrupts


def steps(snapshots: Sequence[StateSnapshot]) -> Iterator[Step]:
    """Each node's run, oldest first, from the thread's snapshots (oldest first); an update (a resume) as a
    step of its own, named after its source."""
    for index, snapshot in enumerate(snapshots):
        after = snapshots[index + 1].values if index + 1 < len(snapshots) else snapshot.values
        before = snapshots[index - 1].values if index else {}
        if (snapshot.metadata or {}).get("source") == UPDATE:
            yield Step(UPDATE, {}, snapshot.values, before)
        for task in snapshot.tasks:
            if task.result is not None or task.interrupts:
                waiting = frozenset() if task.result is not None else _waiting(task.interrupts)
                yield Step(task.name, task.result or {}, after, snapshot.values, waiting)


def _waiting(interrupts: Sequence[Any]) -> frozenset[str]:
    """The ids of the calls that `interrupts` (approval requests) are for."""
    values = [interrupt.value for interrupt in interrupts]
    return frozenset(str(value.get("tool_call_id")) for value in values if isinstance(value, dict))


def timeline(snapshots: Sequence[StateSnapshot]) -> Timeline:
    """The thread's timeline, from its snapshots oldest first."""
    built = _Builder()
    if snapshots:  # the tokens before the first snapshot read (a long thread's page reads its latest ones)
        built.usage_total = int((snapshots[0].values.get("usage") or {}).get("total_tokens", 0))
    for step in steps(snapshots):
        built.add(step)
    latest = snapshots[-1] if snapshots else None
    built.finish(latest)
    return built.result


class _Builder:
    """Reads the steps one by one into a `Timeline`."""

    def __init__(self) -> None:
        self.result = Timeline()
        self.last: str | None = None  # the node of the last step, for the path's edges
        self.usage_total = 0
        self.circuits: dict[str, Any] = {}

    def add(self, step: Step) -> None:
        self._path(step.node)
        handler = _HANDLERS.get(step.node)
        if handler is not None:
            handler(self, step)

    def finish(self, latest: StateSnapshot | None) -> None:
        if latest is None:
            return
        if latest.next:
            self.result.stopped_at = latest.next[0]
        elif latest.values.get("finish_reason") == "answered":
            self._path(END)
            self.result.stopped_at = END
        else:
            self.result.stopped_at = self.last

    # the path -------------------------------------------------------------------------------------------

    def _path(self, node: str) -> None:
        if node == UPDATE:  # a resume continues as if from check_finish (`prepare_resume`)
            self.last = CHECK_FINISH
            return
        if self.last is not None and self.last != node:
            self.result.edges.add((self.last, node))
        self.result.nodes.add(node)
        self.last = node

    # the rounds -----------------------------------------------------------------------------------------

    def round(self, after: Mapping[str, Any]) -> Round:
        """The open round, or a new one."""
        rounds = self.result.rounds
        if not rounds or rounds[-1].closed:
            rounds.append(Round(number=(after.get("iteration") or 0) + 1))
        return rounds[-1]

    def note(self, event: Event) -> None:
        """An event in the open round, or between rounds (a new task, a resume) as a round of its own."""
        rounds = self.result.rounds
        if rounds and not rounds[-1].closed:
            rounds[-1].events.append(event)
        else:
            rounds.append(Round(number=0, events=[event], closed=True))

    def tokens(self, writes: Mapping[str, Any]) -> int:
        """The tokens a step's usage write adds (usage starts again at 0 on a fresh budget)."""
        if "usage" not in writes:
            return 0
        total = int((writes["usage"] or {}).get("total_tokens", 0))
        added = total - self.usage_total if total >= self.usage_total else total
        self.usage_total = total
        return added

    def call(self, current: Round, call_id: str) -> Call | None:
        return next((call for call in current.calls if call.call_id == call_id), None)


def _cache_read(step: Step) -> int:
    """The prompt tokens a step's model calls read from the provider's cache (usage saved before reinloop kept
    them, or not a count: 0; a fresh budget starts again at 0)."""

    def read(values: Mapping[str, Any]) -> int:
        usage = values.get("usage")
        count = usage.get("cache_read_tokens", 0) if isinstance(usage, Mapping) else 0
        return count if isinstance(count, int) and count > 0 else 0

    after, before = read(step.after), read(step.before)
    return after - before if after >= before else after


def _on_start(built: _Builder, step: Step) -> None:
    if step.writes.get("task"):
        built.usage_total = 0
        built.note(Event("task", str(step.writes["task"])))


def _on_update(built: _Builder, step: Step) -> None:
    built.usage_total = int((step.after.get("usage") or {}).get("total_tokens", 0))
    left = step.after.get("iterations_left")
    text = "a fresh budget" + (f" of {left} rounds" if left else "")
    before = {message.id for message in step.before.get("messages", [])}
    hints = [m.text for m in step.after.get("messages", []) if isinstance(m, HumanMessage) and m.id not in before]
    built.note(Event("resumed", text + "".join(f"; {hint}" for hint in hints)))


def _on_decide(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    current.tokens += built.tokens(step.writes)
    current.cached += _cache_read(step)
    decision = step.after.get("decision") or {}
    messages = [m for m in step.writes.get("messages", []) if isinstance(m, AIMessage)]
    text = " ".join(message.text for message in messages if message.text)
    if text and text != current.text:
        current.text = f"{current.text}\n{text}".strip()
    kind = decision.get("kind")
    if kind == "act":
        current.calls.extend(_call(raw) for raw in decision.get("calls", []) if not built.call(current, raw["id"]))
    elif kind == "answer":
        current.events.append(Event("answer", str(decision.get("answer") or "")))
    elif kind == "unparsable":
        current.events.append(Event("unparsable", f"{decision.get('error')}: {decision.get('raw') or ''}"))
    elif kind == "stop":
        current.events.append(Event("stop", str(decision.get("stop") or "")))


def _call(raw: Mapping[str, Any]) -> Call:
    return Call(str(raw.get("id")), str(raw.get("name")), json.dumps(raw.get("args"), ensure_ascii=False))


def _on_validate_args(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    for check in step.after.get("checks") or []:
        call = built.call(current, check["call_id"])
        if call is None:
            continue
        call.review = check.get("review")
        call.args = json.dumps(check["args"], ensure_ascii=False)
        if check.get("cached") is not None:
            call.outcome = "cached"
        elif check.get("error_kind"):
            call.outcome, call.note, call.failed = check["error_kind"], check.get("error"), True
        else:
            call.outcome = "ok"
    for call in current.calls:
        if call.call_id in step.waiting:
            call.outcome = "waiting"
    if step.writes.get("correction"):
        current.events.append(Event("retry", "unreadable reply: asked again with a correction hint"))


def _on_execute_tool(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    for outcome in step.writes.get("tool_results") or []:
        call = built.call(current, outcome["call_id"])
        if call is None:
            continue
        call.result, call.attempts = outcome["content"], outcome.get("attempts", 0)
        if outcome.get("error_kind") is not None:  # it ran and failed: tool_error, timeout, empty_result ...
            call.outcome, call.failed = outcome["error_kind"], True
        if call.attempts > 1:
            current.events.append(Event("retried", f"{call.name} ran {call.attempts} times (in-place retries)"))


def _on_observe(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    for message in step.writes.get("messages", []):
        if isinstance(message, ToolMessage) and (call := built.call(current, message.tool_call_id)):
            if call.result is None or not call.attempts:
                call.result = message.text
            if call.outcome == "cached":
                current.events.append(Event("cached", f"{call.name} was answered from cache, not run again"))
            elif call.outcome in REFUSALS:
                current.events.append(Event("refused", f"{call.name}: {call.note or call.outcome}"))
    _circuits(built, current, step.writes.get("circuits"))


def _circuits(built: _Builder, current: Round, circuits: Mapping[str, Any] | None) -> None:
    from reinloop.guards.tool_circuit import circuit_text

    for name, circuit in (circuits or {}).items():
        opened = circuit.get("opened", 0)
        if opened and opened != (built.circuits.get(name) or {}).get("opened", 0):
            current.events.append(Event("circuit", f"{name}: {circuit_text(circuit)}"))
    if circuits is not None:
        built.circuits = dict(circuits)


def _on_compress_memory(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    current.tokens += built.tokens(step.writes)
    current.cached += _cache_read(step)
    if step.writes.get("summaries"):
        current.events.append(Event("memory", f"window entries folded into a summary: {step.writes['summaries'][-1]}"))


def _on_check_finish(built: _Builder, step: Step) -> None:
    current = built.round(step.after)
    if step.writes.get("reflection"):
        current.events.append(Event("reflection", str(step.writes["reflection"])))
    reason = step.after.get("finish_reason")
    if reason == "answered":  # the answer is the round's answer event
        current.events.append(Event("finish", "", reason))
    current.closed = True


def _on_circuit_break(built: _Builder, step: Step) -> None:
    messages: list[BaseMessage] = [m for m in step.writes.get("messages", []) if isinstance(m, AIMessage)]
    text = " ".join(str(m.response_metadata.get(EXPLANATION_KEY, m.text)) for m in messages)
    reason = step.after.get("finish_reason") or step.before.get("finish_reason")
    built.result.edges.add((CIRCUIT_BREAK, END))
    built.result.nodes.add(END)
    rounds = built.result.rounds
    if rounds:
        rounds[-1].events.append(Event("finish", text, str(reason)))
    else:
        built.note(Event("finish", text, str(reason)))


_HANDLERS = {
    START: _on_start,
    UPDATE: _on_update,
    DECIDE: _on_decide,
    VALIDATE_ARGS: _on_validate_args,
    EXECUTE_TOOL: _on_execute_tool,
    OBSERVE: _on_observe,
    COMPRESS_MEMORY: _on_compress_memory,
    CHECK_FINISH: _on_check_finish,
    CIRCUIT_BREAK: _on_circuit_break,
}
