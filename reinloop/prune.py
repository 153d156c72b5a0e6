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
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

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

# LangGraph rebuilds a DeltaChannel's value from older checkpoints and their writes, and records its update
# counters in checkpoint metadata: such a thread is left whole (reinloop's own graph has no DeltaChannel).
DELTA_METADATA_KEYS = ("counters_since_delta_snapshot", "delta_writes_versioned")


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
    refused: tuple[str, ...] = ()  # threads left whole: their graph uses a DeltaChannel
    dry_run: bool = False


def prune(
    database: Database,
    threads: str | Iterable[str] | None = None,
    *,
    keep: int = 1,
    keep_ids: Iterable[str] = (),
    vacuum: bool = False,
    dry_run: bool = False,
) -> PruneReport:
    """Delete the superseded checkpoints of `threads` (every thread when None), and return what went.

    Per thread and checkpoint namespace, the latest `keep` checkpoints stay (the latest is what `get_state`,
    `resume` and ``invoke(None, config)`` read), and so do the checkpoints whose ids are in `keep_ids` and
    those marked with `mark`. Pending writes go with their checkpoint, so the latest keeps the writes a
    crashed run resumes with; on PostgreSQL the channel values only deleted checkpoints used go too. A kept
    checkpoint whose parent is deleted is linked to its nearest kept ancestor (none for the oldest), so the
    history lists the kept checkpoints as one chain.

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
    with _tables(database) as tables:
        before = tables.size()
        total, found, refused = _Pruned(), 0, []
        for thread in tables.thread_ids() if chosen is None else chosen:
            with tables.transaction(commit=not dry_run):
                pruned = _prune_thread(tables, thread, keep, pinned)
            if pruned is None:
                refused.append(thread)
            else:
                total, found = total + pruned, found + (pruned.kept > 0)  # a thread that exists keeps one
        if vacuum and not dry_run:
            tables.vacuum()
        return PruneReport(found, total.checkpoints, total.writes, total.blobs, total.kept, before, tables.size(),
                           tuple(refused), dry_run)  # fmt: skip


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


def _prune_thread(tables: _Tables, thread: str, keep: int, pinned: frozenset[str]) -> _Pruned | None:
    """Delete what `thread` no longer needs (nothing kept: no such thread); None for a thread left whole."""
    rows = tables.checkpoints(thread)
    if not rows:
        return _Pruned()
    if tables.uses_delta_channels(thread):
        return None
    parents: dict[tuple[str, str], str | None] = {(ns, cid): parent for ns, cid, parent in rows}
    marked = {(m.checkpoint_ns, m.checkpoint_id) for m in tables.marks(thread)}
    by_ns: dict[str, list[str]] = defaultdict(list)
    for ns, cid, _ in rows:
        by_ns[ns].append(cid)
    pruned = _Pruned()
    for ns, ids in by_ns.items():
        latest = sorted(ids, reverse=True)[:keep]  # ids sort by time: the latest is what get_state loads
        kept = {*latest, *(cid for cid in ids if cid in pinned or (ns, cid) in marked)}
        deleted = [cid for cid in ids if cid not in kept]
        if not deleted:
            pruned += _Pruned(kept=len(kept))
            continue
        writes = tables.delete_writes(thread, ns, deleted)
        blobs = tables.delete_blobs(thread, ns, deleted)  # before the checkpoints: it reads what they name
        pruned += _Pruned(tables.delete_checkpoints(thread, ns, deleted), writes, blobs, len(kept))
        tables.relink(thread, ns, _relinked(ns, kept, parents))
    if stale := marked - parents.keys():  # marks of checkpoints deleted by other means (delete_thread)
        for ns in {ns for ns, _ in stale}:
            tables.remove_marks(thread, ns, [cid for n, cid in stale if n == ns])
    return pruned


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


class _Tables(Protocol):
    """LangGraph's checkpoint tables and reinloop's marks in one database; ids are (thread, namespace,
    checkpoint ids). Every statement takes its values as parameters."""

    def transaction(self, *, commit: bool) -> contextlib.AbstractContextManager[None]: ...
    def thread_ids(self) -> list[str]: ...
    def checkpoints(self, thread: str) -> list[tuple[str, str, str | None]]: ...
    def uses_delta_channels(self, thread: str) -> bool: ...
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
def _tables(database: Database) -> Iterator[_Tables]:
    if not isinstance(database, BaseCheckpointSaver):
        with open_checkpointer(database) as saver, _tables(saver) as tables:
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


class _SqliteTables:
    """`SqliteSaver`'s tables: channel values are stored inside each checkpoint, writes in `writes`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        self.has_marks = self.conn.execute(query, (MARKS_TABLE,)).fetchone() is not None

    @classmethod
    @contextlib.contextmanager
    def opened(cls, saver: SqliteSaver) -> Iterator[_SqliteTables]:
        # The saver's lock: LangGraph's threads in this process use the same connection.
        with saver.lock:
            saver.setup()
            yield cls(saver.conn)

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

    def uses_delta_channels(self, thread: str) -> bool:
        query = (
            "SELECT 1 FROM checkpoints WHERE thread_id = ? AND (json_type(CAST(metadata AS TEXT), ?) IS NOT NULL "
            "OR json_type(CAST(metadata AS TEXT), ?) IS NOT NULL) LIMIT 1"
        )
        paths = tuple(f"$.{key}" for key in DELTA_METADATA_KEYS)
        return self.conn.execute(query, (thread, *paths)).fetchone() is not None

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


class _PostgresTables:
    """`PostgresSaver`'s tables: channel values in `checkpoint_blobs` by version, writes in
    `checkpoint_writes`."""

    def __init__(self, conn: Connection[Any], cursor: Cursor[Any]) -> None:
        self.conn, self.cur = conn, cursor
        self.cur.execute("SELECT to_regclass(%s) IS NOT NULL", (MARKS_TABLE,))
        self.has_marks = bool((self.cur.fetchone() or (False,))[0])

    @classmethod
    @contextlib.contextmanager
    def opened(cls, saver: PostgresSaver) -> Iterator[_PostgresTables]:
        from psycopg import Connection
        from psycopg.rows import tuple_row

        if saver.pipe is not None:
            raise ConfigurationError("prune needs a PostgresSaver without a pipeline: pass the database's URL instead")
        with saver.lock, contextlib.ExitStack() as stack:
            conn = saver.conn if isinstance(saver.conn, Connection) else stack.enter_context(saver.conn.connection())
            yield cls(conn, stack.enter_context(conn.cursor(row_factory=tuple_row)))

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

    def uses_delta_channels(self, thread: str) -> bool:
        query = "SELECT 1 FROM checkpoints WHERE thread_id = %s AND metadata ?| %s LIMIT 1"
        self.cur.execute(query, (thread, list(DELTA_METADATA_KEYS)))
        return self.cur.fetchone() is not None

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
