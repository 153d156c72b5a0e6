"""The public API, `prune`, `mark`, `unmark` and `marks`, and the plan that decides, thread by thread, which
checkpoints go and which stay, and which delta channels' values are stored in a kept checkpoint first.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.pregel import Pregel

from reinloop._langgraph import DeltaChannel
from reinloop.checkpoint import open_checkpointer
from reinloop.errors import ConfigurationError, PruneError
from reinloop.pruning.postgres_tables import _PostgresTables
from reinloop.pruning.sqlite_tables import _SqliteTables
from reinloop.pruning.tables import Mark, _Tables

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver

Database = BaseCheckpointSaver[Any] | str | Path
"""A `SqliteSaver`, a `PostgresSaver`, or what `open_checkpointer` opens: a SQLite path or a URL."""


@dataclass(frozen=True)
class PruneReport:
    """What `prune` deleted (or, with ``dry_run``, would delete)."""

    threads: int  # threads found and looked at
    checkpoints: int  # checkpoints deleted
    writes: int  # pending writes deleted: those of the deleted checkpoints
    blobs: int  # channel values deleted (PostgreSQL keeps them in checkpoint_blobs; SQLite inside checkpoints)
    kept: int  # checkpoints left in the threads looked at
    bytes_before: int  # the database's size: SQLite pages, or PostgreSQL's checkpoint tables with their indexes
    bytes_after: int
    dry_run: bool = False


def prune(
    database: Database,
    threads: str | Iterable[str] | None = None,
    *,
    keep: int = 1,
    keep_ids: Iterable[str] = (),
    vacuum: bool = False,
    dry_run: bool = False,
    graph: Pregel[Any, Any, Any, Any] | None = None,
) -> PruneReport:
    """Delete the superseded checkpoints of `threads` (every thread when None), and return what went.

    Per thread and checkpoint namespace, the latest `keep` checkpoints stay (the latest is what `get_state`,
    `resume` and ``invoke(None, config)`` read), and so do the checkpoints whose ids are in `keep_ids` and
    those marked with `mark`. Pending writes go with their checkpoint, so the latest keeps the writes a
    crashed run resumes with; on PostgreSQL the channel values only deleted checkpoints used go too. A kept
    checkpoint whose parent is deleted is linked to its nearest kept ancestor (none for the oldest), so the
    history lists the kept checkpoints as one chain.

    A channel saved as deltas (LangGraph's `DeltaChannel`: reinloop's messages) is rebuilt from the nearest
    ancestor that stores its value and the writes since. Before the ancestors of a kept checkpoint go, its
    value is stored in it, read through `graph` (by default reinloop's agent; pass the compiled graph whose
    threads these are if it is another with delta channels). Where that cannot be done (a channel `graph`
    does not have, or a run saved a newer checkpoint meanwhile), the ancestors the channel is rebuilt from
    are kept instead.

    Each thread is pruned in one transaction that first locks out other writers (SQLite) or reads one
    snapshot (PostgreSQL): a run appending to the thread meanwhile keeps every checkpoint it saves, since
    only checkpoints older than the latest at that moment are deleted. Forking or replaying a thread from a
    checkpoint while it is pruned is not safe. On PostgreSQL a thread whose rows another transaction changes
    meanwhile (a second prune) fails with psycopg's ``SerializationFailure``, the threads before it pruned:
    running it again is safe. `dry_run` rolls each transaction back: the report says what would go.

    SQLite files do not shrink by themselves: `vacuum` rewrites the file afterwards (SQLite ``VACUUM``, which
    needs the file to itself for a moment and as much free disk as the file). On PostgreSQL `vacuum` runs a
    plain ``VACUUM`` of the checkpoint tables, which makes the space reusable (the tables stop growing) but
    rarely returns it to the disk; autovacuum does the same in time.

    `database` is a `SqliteSaver`, a `PostgresSaver`, or a SQLite path or ``postgresql://`` URL to open.
    """
    if keep < 1:
        raise ConfigurationError(f"keep must be at least 1 (the latest checkpoint resumes a thread), got {keep!r}")
    chosen = [threads] if isinstance(threads, str) else None if threads is None else list(threads)
    pinned = frozenset([keep_ids] if isinstance(keep_ids, str) else keep_ids)
    with _opened(database) as saver, _tables(saver) as tables:
        rebuild = _Rebuilder(saver, graph)
        before = tables.size()
        total, found = _Pruned(), 0
        for thread in tables.thread_ids() if chosen is None else chosen:
            snapshots: _Snapshots = {}
            if deltas := tables.delta_channels(thread):
                with tables.transaction(commit=False):
                    wanted = _plan(tables, thread, keep, pinned, deltas).snapshots
                with tables.unlocked():  # the saver reads the values LangGraph would rebuild
                    snapshots = {at: rebuild(thread, *at, channels) for at, channels in wanted.items()}
            with tables.transaction(commit=not dry_run):
                pruned = _prune_thread(tables, thread, keep, pinned, snapshots)
            total, found = total + pruned, found + (pruned.kept > 0)  # a thread that exists keeps one
        if vacuum and not dry_run:
            tables.vacuum()
        return PruneReport(found, total.checkpoints, total.writes, total.blobs, total.kept, before, tables.size(),
                           dry_run)  # fmt: skip


def mark(database: Database, config: RunnableConfig, label: str = "") -> str:
    """Keep the checkpoint in `config` through every `prune`, and return its id.

    `config` names the thread and, optionally, the checkpoint (``checkpoint_id``, as in a snapshot's
    config); without one the thread's latest checkpoint is marked. Marking again changes the label.
    """
    configurable = config.get("configurable") or {}
    thread, ns = str(configurable.get("thread_id")), configurable.get("checkpoint_ns", "")
    with _tables(database) as tables, tables.transaction(commit=True):
        ids = sorted((cid for n, cid, _ in tables.checkpoints(thread) if n == ns), reverse=True)
        chosen = configurable.get("checkpoint_id") or (ids[0] if ids else None)
        if chosen is None or chosen not in ids:
            raise PruneError(f"no checkpoint to mark at {_where(config)}")
        tables.add_mark(Mark(thread, ns, chosen, label))
        return str(chosen)


def unmark(database: Database, config: RunnableConfig) -> bool:
    """Let `prune` delete the checkpoint in `config` again; whether it was marked."""
    configurable = config.get("configurable") or {}
    if not configurable.get("checkpoint_id"):
        raise PruneError(f"unmark needs the checkpoint's id: {_where(config)} names none")
    with _tables(database) as tables, tables.transaction(commit=True):
        return tables.remove_marks(
            str(configurable["thread_id"]), configurable.get("checkpoint_ns", ""), [configurable["checkpoint_id"]]
        )


def latest_checkpoints(database: Database) -> list[tuple[str, str]]:
    """Each thread's id and the id of its latest checkpoint, the most recently saved first (what `reinloop
    inspect` lists), read without loading any checkpoint. An id SQLite holds as bytes that are not UTF-8 has
    them as lone surrogates (Python's ``surrogateescape``): ``thread.encode("utf-8", "surrogateescape")``."""
    with _tables(database) as tables:
        return tables.latest()


def marks(database: Database, thread_id: str | None = None) -> list[Mark]:
    """The marked checkpoints of `thread_id` (of every thread when None), oldest first within a thread."""
    with _tables(database) as tables:
        return tables.marks(thread_id)


# one thread ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pruned:
    """What went from one thread (or several, added up), and how many checkpoints stayed."""

    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    kept: int = 0

    def __add__(self, other: _Pruned) -> _Pruned:
        return _Pruned(*(mine + theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))


_Snapshots = dict[tuple[str, str], dict[str, Any]]
"""Values to store in kept checkpoints, by (namespace, checkpoint id) and channel."""


@dataclass(frozen=True)
class _Plan:
    """One thread's checkpoints as read (parents, marks), what it keeps (ids by namespace), and the delta
    channels to store in some of the kept ones."""

    parents: dict[tuple[str, str], str | None]  # (namespace, checkpoint id): parent id
    marked: set[tuple[str, str]]
    kept: dict[str, set[str]]
    snapshots: dict[tuple[str, str], set[str]]  # (namespace, checkpoint id): channels


def _plan(tables: _Tables, thread: str, keep: int, pinned: frozenset[str], deltas: set[str]) -> _Plan:
    rows = tables.checkpoints(thread)
    marked = {(m.checkpoint_ns, m.checkpoint_id) for m in tables.marks(thread)}
    plan = _Plan({(ns, cid): parent for ns, cid, parent in rows}, marked, {}, {})
    by_ns: dict[str, list[str]] = defaultdict(list)
    for ns, cid, _ in rows:
        by_ns[ns].append(cid)
    for ns, ids in by_ns.items():
        latest = sorted(ids, reverse=True)[:keep]  # ids sort by time: the latest is what get_state loads
        kept = plan.kept[ns] = {*latest, *(cid for cid in ids if cid in pinned or (ns, cid) in marked)}
        for cid in kept:
            # A kept checkpoint whose parent goes needs the value of each delta channel it does not store.
            if deltas and (parent := plan.parents[(ns, cid)]) is not None and parent not in kept:
                stored, versioned = tables.delta_state(thread, ns, cid, deltas)
                if missing := versioned - stored:
                    plan.snapshots[(ns, cid)] = missing
    return plan


def _prune_thread(tables: _Tables, thread: str, keep: int, pinned: frozenset[str], snapshots: _Snapshots) -> _Pruned:
    """Delete what `thread` no longer needs (nothing kept: no such thread), after storing `snapshots` where the
    plan still asks for them."""
    plan = _plan(tables, thread, keep, pinned, tables.delta_channels(thread))
    parents = plan.parents
    if not parents:
        return _Pruned()
    pruned = _Pruned()
    for ns, kept in plan.kept.items():
        for (where, cid), channels in plan.snapshots.items():
            if where != ns:
                continue
            values = snapshots.get((ns, cid), {})
            if stored := {channel: values[channel] for channel in channels if channel in values}:
                tables.store(thread, ns, cid, stored)
            if unread := channels - stored.keys():  # kept in full instead: the rows they are rebuilt from
                kept |= _replayed(tables, thread, ns, cid, parents, unread)
        deleted = [cid for n, cid in parents if n == ns and cid not in kept]
        if not deleted:
            pruned += _Pruned(kept=len(kept))
            continue
        writes = tables.delete_writes(thread, ns, deleted)
        blobs = tables.delete_blobs(thread, ns, deleted)  # before the checkpoints: it reads what they name
        pruned += _Pruned(tables.delete_checkpoints(thread, ns, deleted), writes, blobs, len(kept))
        tables.relink(thread, ns, _relinked(ns, kept, parents))
    if stale := plan.marked - parents.keys():  # marks of checkpoints deleted by other means (delete_thread)
        for ns in {ns for ns, _ in stale}:
            tables.remove_marks(thread, ns, [cid for n, cid in stale if n == ns])
    return pruned


def _replayed(
    tables: _Tables, thread: str, ns: str, cid: str, parents: dict[tuple[str, str], str | None], channels: set[str]
) -> set[str]:
    """The ancestors of `cid` that LangGraph reads to rebuild `channels` there: up to and including the nearest
    that stores each channel's value (to the first checkpoint if none does), each with its writes."""
    needed: set[str] = set()
    for channel in channels:
        walked, ancestor = {cid}, parents.get((ns, cid))
        while ancestor is not None and ancestor not in walked:  # `put` can loop a chain: `walked` ends it
            walked.add(ancestor)
            needed.add(ancestor)
            if channel in tables.delta_state(thread, ns, ancestor, {channel})[0]:
                break
            ancestor = parents.get((ns, ancestor))
    return needed


class _Rebuilder:
    """Reads the value a delta channel has at a checkpoint as LangGraph rebuilds it: the nearest stored value
    and the writes since (`get_delta_channel_history`), replayed through the graph's channel."""

    def __init__(self, saver: BaseCheckpointSaver[Any], graph: Pregel[Any, Any, Any, Any] | None) -> None:
        self.saver, self.graph = saver, graph

    def __call__(self, thread: str, ns: str, checkpoint_id: str, channels: set[str]) -> dict[str, Any]:
        if self.graph is None:
            from reinloop.graph import agent_topology  # the graph imports this module's callers

            self.graph = agent_topology()
        specs = {name: spec for name in channels if isinstance(spec := self.graph.channels.get(name), DeltaChannel)}
        if not specs:
            return {}
        config = RunnableConfig(configurable={"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id})
        values: dict[str, Any] = {}
        for name, history in self.saver.get_delta_channel_history(config=config, channels=list(specs)).items():
            channel = specs[name].from_checkpoint(history.get("seed"))
            channel.replay_writes(history["writes"])
            values[name] = channel.get()
        return values


def _relinked(ns: str, kept: set[str], parents: dict[tuple[str, str], str | None]) -> dict[str, str | None]:
    """The kept checkpoints whose parent goes, with their nearest kept ancestor (None: they become roots)."""
    relinked: dict[str, str | None] = {}
    for cid in kept:
        parent = nearest = parents[(ns, cid)]
        seen = {cid}
        # `put` replaces a checkpoint saved again, so a parent chain can loop: `seen` ends the walk.
        while nearest is not None and nearest not in kept and nearest not in seen:
            seen.add(nearest)
            nearest = parents.get((ns, nearest))
        nearest = None if nearest in seen else nearest
        if nearest != parent:
            relinked[cid] = nearest
    return relinked


def _where(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    where = f"thread {configurable.get('thread_id')!r}"
    return f"{where}, checkpoint {configurable['checkpoint_id']!r}" if configurable.get("checkpoint_id") else where


# the two databases ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(database: Database) -> Iterator[BaseCheckpointSaver[Any]]:
    if isinstance(database, BaseCheckpointSaver):
        yield database
    else:
        with open_checkpointer(database) as saver:
            yield saver


@contextlib.contextmanager
def _tables(database: Database) -> Iterator[_Tables]:
    if not isinstance(database, BaseCheckpointSaver):
        with _opened(database) as saver, _tables(saver) as tables:
            yield tables
        return
    if isinstance(database, SqliteSaver):
        with _SqliteTables.opened(database) as sqlite:
            yield sqlite
    elif _is_postgres(database):
        with _PostgresTables.opened(database) as postgres:
            yield postgres
    else:
        raise ConfigurationError(
            f"pruning and marks work on a SqliteSaver or a PostgresSaver, not a {type(database).__name__}; "
            "pass the database's path or URL to open one"
        )


def _is_postgres(saver: BaseCheckpointSaver[Any]) -> TypeGuard[PostgresSaver]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:  # the postgres extra is not installed
        return False
    return isinstance(saver, PostgresSaver)
