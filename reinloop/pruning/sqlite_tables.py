"""`SqliteSaver`'s tables, as prune reads and writes them: channel values inside each checkpoint row, pending
writes in `writes`, each thread pruned in one transaction that holds SQLite's write lock.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from threading import Lock
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from reinloop._langgraph import DELTA_COUNTERS_KEY, DeltaSnapshot
from reinloop.errors import PruneError
from reinloop.pruning.tables import (
    CREATE_MARKS_SQL,
    LATEST_SQL,
    MARKS_TABLE,
    SELECT_MARKS_SQL,
    SQLITE_COLUMNS,
    Mark,
    _check_columns,
    _released,
)

SQLITE_CHECKPOINT_SQL = (
    "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


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

    def latest(self) -> list[tuple[str, str]]:
        # As bytes: SQLite keeps whatever bytes a writer bound as TEXT, and Python's sqlite3 fails the whole query
        # on one id that is not UTF-8. Such an id reads with its bytes as lone surrogates (`surrogateescape`).
        query = f"SELECT CAST(thread_id AS BLOB), CAST(latest AS BLOB) FROM ({LATEST_SQL}) ORDER BY latest DESC"
        return [(_text(thread), _text(latest)) for thread, latest in self.conn.execute(query)]

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
