"""`PostgresSaver`'s tables, as prune reads and writes them: channel values in `checkpoint_blobs` by version,
pending writes in `checkpoint_writes`, each thread pruned in one transaction that reads one snapshot.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from threading import Lock
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from reinloop._langgraph import DELTA_COUNTERS_KEY, DeltaSnapshot
from reinloop.errors import ConfigurationError
from reinloop.pruning.tables import (
    CREATE_MARKS_SQL,
    LATEST_SQL,
    MARKS_TABLE,
    POSTGRES_COLUMNS,
    SELECT_MARKS_SQL,
    Mark,
    _check_columns,
    _released,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection, Cursor

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

    def latest(self) -> list[tuple[str, str]]:
        self.cur.execute(LATEST_SQL)
        return [(thread, latest) for thread, latest in self.cur.fetchall()]

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
