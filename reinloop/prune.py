"""A bounded runs database: delete the checkpoints a thread no longer needs, keeping the latest ones and those
a user marked.

Every step of a run saves a checkpoint, so a thread's rows grow with its rounds and never shrink. Only the
latest checkpoint (with its pending writes) is needed to resume or inspect a thread; older ones serve
history and time travel. `prune` deletes the older ones, `mark` keeps a chosen one through every prune.

The SQL is written here for the two savers `open_checkpointer` opens, LangGraph's `SqliteSaver` and
`PostgresSaver`: LangGraph 1.2 offers `prune(thread_ids, strategy="keep_latest")` on `PostgresSaver` only,
and keeps neither more than one checkpoint nor marked ones.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from threading import Lock
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.pregel import Pregel

from reinloop._langgraph import DELTA_COUNTERS_KEY, SUPPORTED, DeltaChannel, DeltaSnapshot
from reinloop.checkpoint import open_checkpointer
from reinloop.errors import ConfigurationError, PruneError

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection, Cursor

__all__ = ["MARKS_TABLE", "Mark", "PruneReport", "mark", "marks", "prune", "unmark"]

Database = BaseCheckpointSaver[Any] | str | Path
"""A `SqliteSaver`, a `PostgresSaver`, or what `open_checkpointer` opens: a SQLite path or a URL."""

# Marks live in a table of their own beside LangGraph's: a checkpoint's metadata cannot be changed once saved
# (savers have no API for it), and a mark must outlive any number of prunes without the operator listing its
# checkpoint again. The statement is valid SQLite and PostgreSQL alike.
MARKS_TABLE = "reinloop_marks"
CREATE_MARKS_SQL = """
CREATE TABLE IF NOT EXISTS reinloop_marks (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)"""


@dataclass(frozen=True)
class Mark:
    """A checkpoint that `prune` keeps, with the user's label for it."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    label: str


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


@contextlib.contextmanager
def _released(lock: Lock) -> Iterator[None]:
    """`lock`, held by the caller, released for a while: the saver's own calls take it."""
    lock.release()
    try:
        yield
    finally:
        lock.acquire()


# the two databases ---------------------------------------------------------------------------------------


class _Tables(Protocol):
    """LangGraph's checkpoint tables and reinloop's marks in one database; ids are (thread, namespace,
    checkpoint ids). Every statement takes its values as parameters."""

    def transaction(self, *, commit: bool) -> contextlib.AbstractContextManager[None]: ...
    def thread_ids(self) -> list[str]: ...
    def checkpoints(self, thread: str) -> list[tuple[str, str, str | None]]: ...
    def unlocked(self) -> contextlib.AbstractContextManager[None]: ...
    def delta_channels(self, thread: str) -> set[str]: ...
    def delta_state(self, thread: str, ns: str, checkpoint_id: str, channels: set[str]) -> tuple[set[str], set[str]]:
        """Of `channels`: those with a value stored at the checkpoint, and those it has a version of."""
        ...

    def store(self, thread: str, ns: str, checkpoint_id: str, values: dict[str, Any]) -> None:
        """Store `values` in the checkpoint as LangGraph stores a delta channel's snapshot."""
        ...

    def delete_writes(self, thread: str, ns: str, ids: Sequence[str]) -> int: ...
    def delete_blobs(self, thread: str, ns: str, ids: Sequence[str]) -> int: ...
    def delete_checkpoints(self, thread: str, ns: str, ids: Sequence[str]) -> int: ...
    def relink(self, thread: str, ns: str, parents: dict[str, str | None]) -> None: ...
    def marks(self, thread: str | None) -> list[Mark]: ...
    def add_mark(self, mark: Mark) -> None: ...
    def remove_marks(self, thread: str, ns: str, ids: Sequence[str]) -> bool: ...
    def size(self) -> int: ...
    def vacuum(self) -> None: ...


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


SELECT_MARKS_SQL = "SELECT thread_id, checkpoint_ns, checkpoint_id, label FROM reinloop_marks"


# The columns prune's statements read and write, per table, as LangGraph's savers create them. Checked before
# a prune: a saver that stores them otherwise fails closed, with nothing changed.
_CHECKPOINT_COLUMNS = frozenset(
    {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata"}
)
_WRITE_COLUMNS = frozenset({"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type"})
SQLITE_COLUMNS = {"checkpoints": _CHECKPOINT_COLUMNS, "writes": _WRITE_COLUMNS | {"value"}}
POSTGRES_COLUMNS = {
    "checkpoints": _CHECKPOINT_COLUMNS,
    "checkpoint_writes": _WRITE_COLUMNS | {"blob"},
    "checkpoint_blobs": frozenset({"thread_id", "checkpoint_ns", "channel", "version", "type", "blob"}),
}
SCHEMA_TEMPLATE = (
    "prune cannot work on this database: LangGraph's table {table!r} lacks the columns {missing} that prune reads "
    "and writes (the saver's tables changed; reinloop supports {supported}). Nothing was changed."
)


def _check_columns(table: str, found: set[str], expected: frozenset[str]) -> None:
    missing = expected - found
    if missing:
        raise ConfigurationError(
            SCHEMA_TEMPLATE.format(table=table, missing=", ".join(sorted(missing)), supported=SUPPORTED)
        )


SQLITE_CHECKPOINT_SQL = (
    "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)


class _SqliteTables:
    """`SqliteSaver`'s tables: channel values are stored inside each checkpoint, writes in `writes`."""

    def __init__(self, conn: sqlite3.Connection, serde: SerializerProtocol, lock: Lock) -> None:
        self.conn, self.serde, self.lock = conn, serde, lock
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        self.has_marks = self.conn.execute(query, (MARKS_TABLE,)).fetchone() is not None
        for table, expected in SQLITE_COLUMNS.items():
            found = {row[0] for row in self.conn.execute("SELECT name FROM pragma_table_info(?)", (table,))}
            _check_columns(table, found, expected)

    @classmethod
    @contextlib.contextmanager
    def opened(cls, saver: SqliteSaver) -> Iterator[_SqliteTables]:
        # The saver's lock: LangGraph's threads in this process use the same connection.
        with saver.lock:
            saver.setup()
            yield cls(saver.conn, saver.serde, saver.lock)

    def unlocked(self) -> contextlib.AbstractContextManager[None]:
        return _released(self.lock)

    @contextlib.contextmanager
    def transaction(self, *, commit: bool) -> Iterator[None]:
        # IMMEDIATE takes the write lock first: no other process saves a checkpoint between the reads and the
        # deletes (it waits for the commit, within its busy timeout).
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.rollback()
            raise
        if commit:
            self.conn.commit()
        else:
            self.conn.rollback()

    def thread_ids(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")]

    def checkpoints(self, thread: str) -> list[tuple[str, str, str | None]]:
        query = "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = ?"
        return [(ns, cid, parent) for ns, cid, parent in self.conn.execute(query, (thread,))]

    def delta_channels(self, thread: str) -> set[str]:
        query = (
            "SELECT DISTINCT counter.key FROM checkpoints, json_each(CAST(metadata AS TEXT), ?) AS counter "
            "WHERE thread_id = ?"
        )
        return {row[0] for row in self.conn.execute(query, (f"$.{DELTA_COUNTERS_KEY}", thread))}

    def delta_state(self, thread: str, ns: str, checkpoint_id: str, channels: set[str]) -> tuple[set[str], set[str]]:
        checkpoint = self._checkpoint(thread, ns, checkpoint_id)
        return channels & checkpoint["channel_values"].keys(), channels & checkpoint["channel_versions"].keys()

    def store(self, thread: str, ns: str, checkpoint_id: str, values: dict[str, Any]) -> None:
        checkpoint = self._checkpoint(thread, ns, checkpoint_id)
        checkpoint["channel_values"].update({name: DeltaSnapshot(value) for name, value in values.items()})
        query = (
            "UPDATE checkpoints SET type = ?, checkpoint = ? "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        )
        self.conn.execute(query, (*self.serde.dumps_typed(checkpoint), thread, ns, checkpoint_id))

    def _checkpoint(self, thread: str, ns: str, checkpoint_id: str) -> Any:
        query = (
            "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        )
        row = self.conn.execute(query, (thread, ns, checkpoint_id)).fetchone()
        if row is None:
            raise PruneError(f"checkpoint {checkpoint_id!r} of thread {thread!r} went while it was pruned")
        return self.serde.loads_typed((row[0], row[1]))

    def delete_writes(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        query = "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        return self.conn.executemany(query, [(thread, ns, cid) for cid in ids]).rowcount

    def delete_blobs(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        return 0  # SQLite stores channel values inside the checkpoint rows

    def delete_checkpoints(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        query = "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        return self.conn.executemany(query, [(thread, ns, cid) for cid in ids]).rowcount

    def relink(self, thread: str, ns: str, parents: dict[str, str | None]) -> None:
        query = (
            "UPDATE checkpoints SET parent_checkpoint_id = ? "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        )
        self.conn.executemany(query, [(parent, thread, ns, cid) for cid, parent in parents.items()])

    def marks(self, thread: str | None) -> list[Mark]:
        if not self.has_marks:
            return []
        where, params = ("", ()) if thread is None else (" WHERE thread_id = ?", (thread,))
        rows = self.conn.execute(SELECT_MARKS_SQL + where + " ORDER BY thread_id, checkpoint_ns, checkpoint_id", params)
        return [Mark(*row) for row in rows]

    def add_mark(self, mark: Mark) -> None:
        self.conn.execute(CREATE_MARKS_SQL)
        self.has_marks = True
        self.conn.execute(
            "INSERT OR REPLACE INTO reinloop_marks (thread_id, checkpoint_ns, checkpoint_id, label) "
            "VALUES (?, ?, ?, ?)",
            (mark.thread_id, mark.checkpoint_ns, mark.checkpoint_id, mark.label),
        )

    def remove_marks(self, thread: str, ns: str, ids: Sequence[str]) -> bool:
        if not self.has_marks:
            return False
        query = "DELETE FROM reinloop_marks WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        return self.conn.executemany(query, [(thread, ns, cid) for cid in ids]).rowcount > 0

    def size(self) -> int:
        (pages,) = self.conn.execute("PRAGMA page_count").fetchone()
        (page_size,) = self.conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(page_size)

    def vacuum(self) -> None:
        self.conn.execute("VACUUM")
        # In WAL mode the rewritten pages sit in the -wal file until a checkpoint copies them back: truncate it
        # now, so the files on disk shrink too.
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# Blobs are stored once per channel version and shared by every checkpoint whose channel_versions name that
# version, so only the versions no kept checkpoint names can go. Listing the versions the deleted checkpoints
# name (rather than every blob nobody names) spares a run's blobs that commit before their checkpoint does.
PG_VERSIONS_SQL = """
SELECT DISTINCT v.key, v.value
FROM checkpoints c CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND (c.checkpoint_id = ANY(%s)) = %s
"""


# Of some channels, per channel: whether a value is stored at one checkpoint (inline in its channel_values, a
# primitive or the marker PostgresSaver leaves there for a snapshot, or as a blob of the version it names), and
# whether it names a version of the channel at all.
PG_DELTA_STATE_SQL = """
SELECT channel.name,
  (c.checkpoint -> 'channel_values') ? channel.name OR EXISTS (
    SELECT 1 FROM checkpoint_blobs b
    WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = channel.name
      AND b.version = c.checkpoint -> 'channel_versions' ->> channel.name AND b.type <> 'empty'),
  (c.checkpoint -> 'channel_versions') ? channel.name
FROM checkpoints c CROSS JOIN unnest(%s::text[]) AS channel(name)
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = %s
"""
PG_STORE_SNAPSHOT_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT c.thread_id, c.checkpoint_ns, channel.name, c.checkpoint -> 'channel_versions' ->> channel.name, %s, %s
FROM checkpoints c CROSS JOIN (SELECT %s::text AS name) AS channel
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = %s
ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
"""
PG_MARK_SNAPSHOT_SQL = """
UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, ARRAY['channel_values', %s::text], 'true'::jsonb)
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""


class _PostgresTables:
    """`PostgresSaver`'s tables: channel values in `checkpoint_blobs` by version, writes in
    `checkpoint_writes`."""

    def __init__(self, conn: Connection[Any], cursor: Cursor[Any], serde: SerializerProtocol, lock: Lock) -> None:
        self.conn, self.cur, self.serde, self.lock = conn, cursor, serde, lock
        self.cur.execute("SELECT to_regclass(%s) IS NOT NULL", (MARKS_TABLE,))
        self.has_marks = bool((self.cur.fetchone() or (False,))[0])
        query = (
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s"
        )
        for table, expected in POSTGRES_COLUMNS.items():
            self.cur.execute(query, (table,))
            _check_columns(table, {row[0] for row in self.cur.fetchall()}, expected)

    @classmethod
    @contextlib.contextmanager
    def opened(cls, saver: PostgresSaver) -> Iterator[_PostgresTables]:
        from psycopg import Connection
        from psycopg.rows import tuple_row

        if saver.pipe is not None:
            raise ConfigurationError("prune needs a PostgresSaver without a pipeline: pass the database's URL instead")
        with saver.lock, contextlib.ExitStack() as stack:
            conn = saver.conn if isinstance(saver.conn, Connection) else stack.enter_context(saver.conn.connection())
            yield cls(conn, stack.enter_context(conn.cursor(row_factory=tuple_row)), saver.serde, saver.lock)

    @contextlib.contextmanager
    def transaction(self, *, commit: bool) -> Iterator[None]:
        from psycopg import Rollback

        with self.conn.transaction():
            # One snapshot for every statement: what a run saves meanwhile is neither seen nor deleted.
            self.cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
            if not commit:
                raise Rollback

    def thread_ids(self) -> list[str]:
        self.cur.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
        return [row[0] for row in self.cur.fetchall()]

    def checkpoints(self, thread: str) -> list[tuple[str, str, str | None]]:
        query = "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = %s"
        self.cur.execute(query, (thread,))
        return [(ns, cid, parent) for ns, cid, parent in self.cur.fetchall()]

    def delta_channels(self, thread: str) -> set[str]:
        query = (
            "SELECT DISTINCT jsonb_object_keys(metadata -> %s) FROM checkpoints WHERE thread_id = %s AND metadata ? %s"
        )
        self.cur.execute(query, (DELTA_COUNTERS_KEY, thread, DELTA_COUNTERS_KEY))
        return {row[0] for row in self.cur.fetchall()}

    def unlocked(self) -> contextlib.AbstractContextManager[None]:
        return _released(self.lock)

    def delta_state(self, thread: str, ns: str, checkpoint_id: str, channels: set[str]) -> tuple[set[str], set[str]]:
        self.cur.execute(PG_DELTA_STATE_SQL, (list(channels), thread, ns, checkpoint_id))
        rows = self.cur.fetchall()
        return {name for name, stored, _ in rows if stored}, {name for name, _, versioned in rows if versioned}

    def store(self, thread: str, ns: str, checkpoint_id: str, values: dict[str, Any]) -> None:
        # As PostgresSaver.put stores a snapshot: the value as a blob of the version the checkpoint names, and
        # `true` in its channel_values, which marks that blob as the snapshot.
        for name, value in values.items():
            kind, blob = self.serde.dumps_typed(DeltaSnapshot(value))
            self.cur.execute(PG_STORE_SNAPSHOT_SQL, (kind, blob, name, thread, ns, checkpoint_id))
            self.cur.execute(PG_MARK_SNAPSHOT_SQL, (name, thread, ns, checkpoint_id))

    def delete_writes(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        query = "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)"
        self.cur.execute(query, (thread, ns, list(ids)))
        return self.cur.rowcount

    def delete_blobs(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        self.cur.execute(PG_VERSIONS_SQL, (thread, ns, list(ids), True))  # named by the deleted checkpoints
        freed = set(self.cur.fetchall())
        self.cur.execute(PG_VERSIONS_SQL, (thread, ns, list(ids), False))  # named by the kept ones
        garbage: dict[str, list[str]] = defaultdict(list)
        for channel, version in freed - set(self.cur.fetchall()):
            garbage[channel].append(version)
        deleted = 0
        query = (
            "DELETE FROM checkpoint_blobs "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = ANY(%s)"
        )
        for channel, versions in garbage.items():
            self.cur.execute(query, (thread, ns, channel, versions))
            deleted += self.cur.rowcount
        return deleted

    def delete_checkpoints(self, thread: str, ns: str, ids: Sequence[str]) -> int:
        query = "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)"
        self.cur.execute(query, (thread, ns, list(ids)))
        return self.cur.rowcount

    def relink(self, thread: str, ns: str, parents: dict[str, str | None]) -> None:
        query = (
            "UPDATE checkpoints SET parent_checkpoint_id = %s "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        )
        self.cur.executemany(query, [(parent, thread, ns, cid) for cid, parent in parents.items()])

    def marks(self, thread: str | None) -> list[Mark]:
        if not self.has_marks:
            return []
        where, params = ("", ()) if thread is None else (" WHERE thread_id = %s", (thread,))
        self.cur.execute(SELECT_MARKS_SQL + where + " ORDER BY thread_id, checkpoint_ns, checkpoint_id", params)
        return [Mark(*row) for row in self.cur.fetchall()]

    def add_mark(self, mark: Mark) -> None:
        self.cur.execute(CREATE_MARKS_SQL)
        self.has_marks = True
        self.cur.execute(
            "INSERT INTO reinloop_marks (thread_id, checkpoint_ns, checkpoint_id, label) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET label = EXCLUDED.label",
            (mark.thread_id, mark.checkpoint_ns, mark.checkpoint_id, mark.label),
        )

    def remove_marks(self, thread: str, ns: str, ids: Sequence[str]) -> bool:
        if not self.has_marks:
            return False
        query = "DELETE FROM reinloop_marks WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = ANY(%s)"
        self.cur.execute(query, (thread, ns, list(ids)))
        return self.cur.rowcount > 0

    def size(self) -> int:
        self.cur.execute(
            "SELECT sum(pg_total_relation_size(to_regclass(name))) FROM unnest(%s::text[]) AS name",
            (["checkpoints", "checkpoint_blobs", "checkpoint_writes", MARKS_TABLE],),
        )
        row = self.cur.fetchone()
        return int(row[0] or 0) if row else 0

    def vacuum(self) -> None:
        from psycopg import sql

        # VACUUM cannot run inside a transaction block.
        autocommit = self.conn.autocommit
        self.conn.autocommit = True
        try:
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                self.cur.execute(sql.SQL("VACUUM {}").format(sql.Identifier(table)))
        finally:
            self.conn.autocommit = autocommit
