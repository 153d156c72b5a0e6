"""What the pages of `reinloop inspect` read from the runs database: a page of threads (each from its latest
checkpoint only; a row that cannot be read says so), one thread's latest checkpoints as a timeline with its
graph, and where a thread stands now."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Interrupt, StateSnapshot

from reinloop.errors import CheckpointError, ConfigurationError
from reinloop.inspect.timeline import Timeline, timeline
from reinloop.runs import INTERRUPTS_KEY

__all__ = [
    "HISTORY_WINDOW",
    "PAGE_SIZE",
    "Approval",
    "Histories",
    "Status",
    "ThreadPage",
    "ThreadRow",
    "ThreadView",
    "approvals",
    "status",
    "thread_page",
    "view",
]

PAGE_SIZE = 25
# The most checkpoints a thread's page reads. LangGraph rebuilds the window for every snapshot it reads (about
# 4 ms each here), so the page of a long thread shows its latest ones, read in a few seconds however long the
# thread is and however fast a running writer adds to it.
HISTORY_WINDOW = 1_000
UNREADABLE_ID_TEMPLATE = "unreadable: this thread's id is not UTF-8 text ({raw}), so no page can name it"


@dataclass(frozen=True)
class ThreadRow:
    """One thread in the list, as its latest checkpoint has it."""

    thread_id: str
    task: str
    finish_reason: str  # "" while running, or stopped mid-step
    waiting: bool  # stopped at an approval
    rounds: int
    tokens: int
    updated: str  # when its latest checkpoint was saved, UTC, to the second
    problem: str = ""  # why the row cannot be read (its id is not text, its checkpoint is damaged); "" if it can


@dataclass(frozen=True)
class ThreadPage:
    rows: list[ThreadRow]
    page: int  # from 1
    pages: int
    total: int


@dataclass(frozen=True)
class Status:
    """Where a thread stands: what the page polls to know it must redraw."""

    checkpoint: str  # the latest checkpoint's id
    finish_reason: str | None
    next: list[str]  # the nodes it stopped before (a run in progress, an approval, a crash)


@dataclass(frozen=True)
class Approval:
    """A call waiting for a person's answer (`reinloop.approvals`)."""

    interrupt_id: str
    name: str
    args: str  # JSON
    thought: str


@dataclass
class ThreadView:
    """One thread: its state now, its timeline and its graph with the path marked."""

    thread_id: str
    values: dict[str, Any]
    status: Status
    timeline: Timeline
    svg: str
    graph_problem: str  # why there is no graph: Graphviz's `dot` is missing
    approvals: list[Approval] = field(default_factory=list)
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (round, tokens) for the chart
    earlier: bool = False  # the thread has checkpoints before those read (HISTORY_WINDOW)


def thread_page(saver: Any, page: int, size: int = PAGE_SIZE) -> ThreadPage:
    """The threads on `page` (from 1), the most recently saved first."""
    from reinloop.pruning import latest_checkpoints

    latest = latest_checkpoints(saver)
    pages = max(1, -(-len(latest) // size))
    page = min(max(page, 1), pages)
    rows = [_row(saver, thread) for thread, _ in latest[(page - 1) * size : page * size]]
    return ThreadPage([row for row in rows if row is not None], page, pages, len(latest))


def _row(saver: Any, thread: str) -> ThreadRow | None:
    try:
        thread.encode()
    except UnicodeEncodeError:  # bytes that are not UTF-8, as `latest_checkpoints` reads them
        raw = repr(thread.encode("utf-8", "surrogateescape"))
        return _unreadable(raw, UNREADABLE_ID_TEMPLATE.format(raw=raw))
    try:
        found = saver.get_tuple(_config(thread))
    except CheckpointError as exc:
        return _unreadable(thread, f"unreadable: {exc}")
    if found is None:  # pruned or deleted since it was listed
        return None
    values = found.checkpoint.get("channel_values") or {}
    waiting = any(channel == INTERRUPTS_KEY for _, channel, _ in found.pending_writes or ())
    return ThreadRow(
        thread_id=thread,
        task=str(values.get("task") or ""),
        finish_reason=str(values.get("finish_reason") or ""),
        waiting=waiting,
        rounds=int(values.get("iteration") or 0),
        tokens=int((values.get("usage") or {}).get("total_tokens", 0)),
        updated=str(found.checkpoint.get("ts", ""))[:19].replace("T", " "),
    )


def _unreadable(thread: str, problem: str) -> ThreadRow:
    return ThreadRow(thread, "", "", False, 0, 0, "", problem)


def status(saver: Any, thread: str) -> Status | None:
    """Where `thread` stands; None for a thread the database does not have."""
    from reinloop.graph import agent_topology

    snapshot = agent_topology(saver).get_state(_config(thread))
    if snapshot.metadata is None:
        return None
    return _status(snapshot)


def _status(snapshot: Any) -> Status:
    return Status(
        checkpoint=str(snapshot.config["configurable"]["checkpoint_id"]),
        finish_reason=snapshot.values.get("finish_reason"),
        next=list(snapshot.next),
    )


class Histories:
    """The threads' latest checkpoints read so far, so that a page redrawn as its thread moves on reads only the
    checkpoints saved since (at most `window`). One read of a thread at a time: a page and its redraws asking
    together read the new checkpoints once. Keeps the `keep` threads read last."""

    STRIPES = 16  # locks that thread ids share: a bounded set, whatever ids requests name

    def __init__(self, keep: int = 8, window: int = HISTORY_WINDOW) -> None:
        self.keep, self.window = keep, window
        self._read: OrderedDict[str, list[StateSnapshot]] = OrderedDict()
        self._lock = threading.Lock()
        self._reading = [threading.Lock() for _ in range(self.STRIPES)]

    def snapshots(self, topology: Any, thread: str) -> list[StateSnapshot]:
        """`thread`'s latest snapshots (at most `window`), oldest first: those read before but the latest (its
        tasks may have written since), and those saved since, read newest first until the one read before."""
        with self._reading[hash(thread) % self.STRIPES]:
            with self._lock:
                kept = self._read.get(thread, [])[:-1]
            known = str(kept[-1].config["configurable"]["checkpoint_id"]) if kept else None
            new, found = _since(topology, thread, known, self.window)
            read = ((kept if found else []) + new[::-1])[-self.window :]
            with self._lock:
                self._read[thread] = read
                self._read.move_to_end(thread)
                while len(self._read) > self.keep:
                    self._read.popitem(last=False)
        return read


def _since(topology: Any, thread: str, known: str | None, limit: int) -> tuple[list[StateSnapshot], bool]:
    """The snapshots of `thread` newer than the checkpoint `known`, newest first, among its latest `limit`; and
    whether `known` was among them."""
    new: list[StateSnapshot] = []
    with closing(topology.get_state_history(_config(thread), limit=limit)) as newest_first:
        for snapshot in newest_first:
            if snapshot.config["configurable"]["checkpoint_id"] == known:
                return new, True
            new.append(snapshot)
    return new, False


def view(saver: Any, thread: str, histories: Histories | None = None) -> ThreadView | None:
    """`thread` as its page shows it, its latest checkpoints read through `histories` if given; None for a
    thread the database does not have."""
    from reinloop.drawing import path_svg
    from reinloop.graph import agent_topology

    topology = agent_topology(saver)
    snapshots = (histories or Histories()).snapshots(topology, thread)
    if not snapshots:
        return None
    latest = snapshots[-1]
    rounds = timeline(snapshots)
    try:
        drawn = path_svg(topology, rounds.nodes, rounds.edges, rounds.stopped_at)
        svg = drawn[drawn.index("<svg") :]  # inline in the page: without the XML declaration and doctype
    except ConfigurationError as exc:  # no Graphviz: the page says so in the graph's place
        svg = ""
        graph_problem = str(exc)
    else:
        graph_problem = ""
    waiting = _approvals(latest)
    tokens = [(each.number, each.tokens) for each in rounds.rounds if each.number]
    earlier = snapshots[0].parent_config is not None
    return ThreadView(thread, dict(latest.values), _status(latest), rounds, svg, graph_problem, waiting, tokens,
                      earlier)  # fmt: skip


def approvals(saver: Any, thread: str) -> list[Approval]:
    """The calls of `thread` waiting for a person's answer."""
    from reinloop.graph import agent_topology

    return _approvals(agent_topology(saver).get_state(_config(thread)))


def _approvals(snapshot: StateSnapshot) -> list[Approval]:
    return [_approval(interrupt) for interrupt in snapshot.interrupts if _is_approval(interrupt)]


def _is_approval(interrupt: Interrupt) -> bool:
    from reinloop.approvals import APPROVAL_REQUEST_TYPE

    return isinstance(interrupt.value, dict) and interrupt.value.get("type") == APPROVAL_REQUEST_TYPE


def _approval(interrupt: Interrupt) -> Approval:
    request = interrupt.value
    return Approval(
        interrupt_id=str(interrupt.id),
        name=str(request.get("name")),
        args=json.dumps(request.get("args"), ensure_ascii=False),
        thought=str(request.get("thought") or ""),
    )


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}
