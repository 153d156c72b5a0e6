"""One writer per thread: a run holds a lease on its thread in the checkpointer's own database.

Two runs continuing one thread at once would each run every remaining step (with new idempotency keys) and
fork its history, so a run takes the thread's lease before its first step and gives it back when it ends; a
second writer gets `ThreadBusyError`, or waits if it was built to. The lease is a session-level advisory lock
on PostgreSQL (on the saver's own connection; for a saver on a pool or an async saver, on one session of the
process's own per saver, however many runs it has going), a row of `reinloop_leases` naming the holder process
on a SQLite file (taken over once that process no longer runs), and in one process a lock per database and
thread, for every saver. A block that reads a thread and then writes it (`reinloop.resume`) holds one lease
across its runs: `hold_thread(..., shared=True)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Final, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from reinloop.drivers import Steps, adrive, drive, io
from reinloop.errors import ThreadBusyError
from reinloop.sqlite import checkpoint_wal, immediate_transaction

__all__ = ["BUSY_TEMPLATE", "LEASES_TABLE", "ahold_thread", "hold_thread"]

BUSY_TEMPLATE = (
    "thread {thread!r} is being run by another process ({holder}): wait for that run to end, or build the agent "
    "with AgentConfig(thread_wait_s=...) to wait for it"
)
LEASES_TABLE: Final = "reinloop_leases"
_CREATE_SQL = f"""
CREATE TABLE IF NOT EXISTS {LEASES_TABLE} (
    thread_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started TEXT NOT NULL,
    token TEXT NOT NULL
)"""
_HOLDER_SQL = f"SELECT host, pid, started FROM {LEASES_TABLE} WHERE thread_id = ?"
_TAKE_SQL = f"INSERT OR REPLACE INTO {LEASES_TABLE} (thread_id, host, pid, started, token) VALUES (?, ?, ?, ?, ?)"
_GIVE_BACK_SQL = f"DELETE FROM {LEASES_TABLE} WHERE thread_id = ? AND token = ?"
# How long one SQLite lease statement waits for another process's write transaction (a checkpoint's save).
_SQLITE_BUSY_TIMEOUT_S = 30.0
# Polling a busy lease when the agent waits for it: from the first delay, doubling up to the last.
_FIRST_POLL_S, _LAST_POLL_S = 0.02, 0.5
# The leases a `hold_thread(..., shared=True)` block holds, by database and thread: the runs inside it (in its
# context, or a copy of it) find their thread held by that block and take no lease of their own.
_SHARED: ContextVar[frozenset[tuple[Hashable, str]]] = ContextVar("reinloop_shared_leases", default=frozenset())


@dataclass(frozen=True, slots=True)
class Holder:
    """A process, as a lease row names it: `started` tells a pid's process from a later one given the same pid."""

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


class _Lease(Protocol):
    holder: str | None  # who holds it, when `take` found it busy

    def take(self) -> bool: ...

    def give_back(self) -> None: ...


@contextlib.contextmanager
def hold_thread(
    saver: BaseCheckpointSaver[Any], thread_id: str, wait_s: float, *, shared: bool = False
) -> Iterator[None]:
    """Hold `thread_id`'s lease on `saver`'s database while the block runs; `ThreadBusyError` if another run
    holds it for longer than `wait_s` seconds. Nothing to take where a `shared` block of this context holds it
    already; with `shared`, the runs inside this block use its lease."""
    sqlite_path = _sqlite_path(saver)
    key = (_database_key(saver, sqlite_path), thread_id)
    if key in _SHARED.get():
        yield
        return
    lease = _lease(saver, sqlite_path, key)
    drive(_take(lease, thread_id, wait_s))
    try:
        with _sharing(key, shared):
            yield
    finally:
        lease.give_back()


@contextlib.asynccontextmanager
async def ahold_thread(
    saver: BaseCheckpointSaver[Any], thread_id: str, wait_s: float, *, shared: bool = False
) -> AsyncIterator[None]:
    """`hold_thread` under ainvoke/astream: the lease's database work runs in a worker thread."""
    sqlite_path = await _asqlite_path(saver)
    key = (_database_key(saver, sqlite_path), thread_id)
    if key in _SHARED.get():
        yield
        return
    lease = _lease(saver, sqlite_path, key)
    await adrive(_take(lease, thread_id, wait_s))
    try:
        with _sharing(key, shared):
            yield
    finally:
        await asyncio.to_thread(lease.give_back)


@contextlib.contextmanager
def _sharing(key: tuple[Hashable, str], shared: bool) -> Iterator[None]:
    """Mark the lease `key` as held for the runs of this context while the block runs, if `shared`. Only a
    block in plain code shares its lease: a run's own lease is held in a generator, which the caller may step
    from other contexts."""
    if not shared:
        yield
        return
    token = _SHARED.set(_SHARED.get() | {key})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _take(lease: _Lease, thread_id: str, wait_s: float) -> Steps[None]:
    """Take `lease`, asking again while it is busy, with growing pauses, for up to `wait_s` seconds; then
    `ThreadBusyError`. The database work runs in a worker thread under ainvoke."""
    deadline = time.monotonic() + wait_s
    delay = _FIRST_POLL_S
    while not (yield from io(lease.take, partial(asyncio.to_thread, lease.take))):
        left = deadline - time.monotonic()
        if left <= 0:
            holder = lease.holder or "this process"
            raise ThreadBusyError(
                BUSY_TEMPLATE.format(thread=thread_id, holder=holder), thread=thread_id, holder=holder
            )
        delay = min(delay * 2, _LAST_POLL_S, left)
        yield from io(partial(time.sleep, delay), partial(asyncio.sleep, delay))


def _lease(saver: BaseCheckpointSaver[Any], sqlite_path: str | None, key: tuple[Hashable, str]) -> _Lease:
    local = _LocalLease(key)
    thread_id = key[1]
    if sqlite_path:
        return _Layered(local, _SqliteLease(sqlite_path, thread_id))
    shared = _postgres_lease(saver, thread_id)
    return local if shared is None else _Layered(local, shared)


def _database_key(saver: BaseCheckpointSaver[Any], sqlite_path: str | None) -> Hashable:
    """What names the saver's database within this process: the file of a SQLite one, else the saver."""
    if sqlite_path:
        status = os.stat(sqlite_path)
        return ("sqlite", status.st_dev, status.st_ino)
    return ("saver", id(saver))


# -- in one process ---------------------------------------------------------------------------------------

_local_guard = threading.Lock()
_local_held: set[tuple[Hashable, str]] = set()


class _LocalLease:
    """A thread's lease among the runs of this process."""

    def __init__(self, key: tuple[Hashable, str]) -> None:
        self.key = key  # the database and the thread
        self.holder: str | None = None

    def take(self) -> bool:
        with _local_guard:
            if self.key in _local_held:
                self.holder = f"another run of this process, {_this_process()}"
                return False
            _local_held.add(self.key)
            return True

    def give_back(self) -> None:
        with _local_guard:
            _local_held.discard(self.key)


@dataclass
class _Layered:
    """This process's lease first, then the database's: a run of this process never asks the database for a
    lease another of its runs holds (a PostgreSQL session may take its own advisory lock twice)."""

    local: _LocalLease
    shared: _Lease
    holder: str | None = None

    def take(self) -> bool:
        if not self.local.take():
            self.holder = self.local.holder
            return False
        try:
            taken = self.shared.take()
        except BaseException:
            self.local.give_back()
            raise
        if not taken:
            self.holder = self.shared.holder
            self.local.give_back()
        return taken

    def give_back(self) -> None:
        try:
            self.shared.give_back()
        finally:
            self.local.give_back()


# -- SQLite -----------------------------------------------------------------------------------------------


def _sqlite_path(saver: BaseCheckpointSaver[Any]) -> str | None:
    """The file of a `SqliteSaver`'s main database; None for another saver or an in-memory database."""
    if not isinstance(saver, SqliteSaver):
        return None
    with saver.lock:
        # The saver's own set-up first, as LangGraph would do it at the run's first read: it switches the file to
        # WAL, which SQLite refuses at once ("database is locked", no busy wait) while another connection, the
        # lease's of a run beside this one, holds a transaction.
        saver.setup()
        rows = saver.conn.execute("PRAGMA database_list").fetchall()
    return _main_file(rows)


async def _asqlite_path(saver: BaseCheckpointSaver[Any]) -> str | None:
    """`_sqlite_path` for any saver under ainvoke, an `AsyncSqliteSaver` included."""
    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError:  # aiosqlite not installed
        return _sqlite_path(saver)
    if not isinstance(saver, AsyncSqliteSaver):
        return _sqlite_path(saver)
    await saver.setup()  # as `_sqlite_path` does; it takes the saver's lock itself
    async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
        rows = await cursor.fetchall()
    return _main_file(rows)


def _main_file(rows: Any) -> str | None:
    files = [row[2] for row in rows if row[1] == "main"]
    return files[0] if files and files[0] else None


class _SqliteLease:
    """A row in the database's `reinloop_leases`, naming the process that holds the thread."""

    def __init__(self, path: str, thread_id: str) -> None:
        self.path = path
        self.thread_id = thread_id
        self.token = uuid.uuid4().hex
        self.holder: str | None = None

    def take(self) -> bool:
        with self._transaction() as conn:
            row = conn.execute(_HOLDER_SQL, (self.thread_id,)).fetchone()
            if row is not None:
                holder = Holder(*row)
                if _running(holder):
                    self.holder = str(holder)
                    return False
            me = _this_process()
            conn.execute(_TAKE_SQL, (self.thread_id, me.host, me.pid, me.started, self.token))
            return True

    def give_back(self) -> None:
        with self._transaction() as conn:
            conn.execute(_GIVE_BACK_SQL, (self.thread_id, self.token))
        # The run is over: its steps move from the -wal file into the database, and the -wal file is cut back
        # (a 200-round run otherwise leaves ~24 kB a round there until SQLite's own checkpoint at 4 MB).
        checkpoint_wal(self.path)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # A connection of its own: the saver's may be inside a write; the read and the write of the row are
        # one step, so two processes never both find the lease free.
        with immediate_transaction(self.path, _SQLITE_BUSY_TIMEOUT_S) as conn:
            conn.execute(_CREATE_SQL)
            yield conn


# -- PostgreSQL -------------------------------------------------------------------------------------------


def _postgres_lease(saver: BaseCheckpointSaver[Any], thread_id: str) -> _Lease | None:
    """The advisory-lock lease of a PostgreSQL saver; None for another saver."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import Connection
    except ImportError:  # the postgres extra is not installed, so no saver can be one
        return None
    if isinstance(saver, PostgresSaver) and isinstance(saver.conn, Connection) and saver.pipe is None:
        return _PostgresLease(saver, thread_id)
    if not isinstance(saver, PostgresSaver | AsyncPostgresSaver):
        return None
    return _SharedSessionLease(_session_of(saver), thread_id)


_PG_HOLDER_SQL = """
SELECT a.pid, coalesce(host(a.client_addr), 'a local socket') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid
    AND l.objsubid = 1"""


class _PostgresLease:
    """A session-level advisory lock on a key made from the thread id, taken on the saver's own connection (a
    `PostgresSaver` on one connection), whose session ends with the process."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        # Advisory locks take a bigint; 64 bits of a digest make two threads' keys collide with odds of 2^-64.
        digest = hashlib.sha256(f"reinloop-thread:{thread_id}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)
        self.holder: str | None = None

    def take(self) -> bool:
        with self.saver.lock:  # LangGraph's threads in this process use the same connection
            return self._try(self.saver.conn)

    def give_back(self) -> None:
        import psycopg

        try:
            with self.saver.lock:
                self._query(self.saver.conn, "SELECT pg_advisory_unlock(%s)", (self.key,))
        except psycopg.OperationalError:  # the session is gone, and its locks with it
            pass

    def _try(self, conn: Any) -> bool:
        row = self._query(conn, "SELECT pg_try_advisory_lock(%s)", (self.key,))
        if row is not None and row[0]:
            return True
        # A bigint key is listed in pg_locks as two oids.
        holder = self._query(conn, _PG_HOLDER_SQL, ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF))
        self.holder = None if holder is None else f"database session {holder[0]} from {holder[1]}"
        return False

    @staticmethod
    def _query(conn: Any, query: str, params: tuple[Any, ...]) -> Any:
        from psycopg.rows import tuple_row

        with conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(query, params)
            return cursor.fetchone()


class _Session:
    """A database session of this process's own, for the leases of one saver on a pool or an async saver,
    whose connections the leases cannot hold or use from a worker thread: every run of the saver takes its
    thread's advisory lock on it, so a process holds one connection for leases however many runs it has going.
    The session ends with the process (or the saver), and its locks with it."""

    def __init__(self, conninfo: tuple[str, dict[str, Any]]) -> None:
        self.conninfo = conninfo
        self.conn: Any = None
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def run(self, query: Any) -> Any:
        import psycopg

        with self.lock:
            if self.conn is None or self.conn.closed:
                dsn, options = self.conninfo
                self.conn = psycopg.connect(dsn, **{**options, "autocommit": True})
            try:
                return query(self.conn)
            except psycopg.OperationalError:
                # The session is gone (the server restarted, the network failed), and its locks with it.
                self.conn.close()
                raise

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()


_sessions_guard = threading.Lock()
_sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()


def _session_of(saver: Any) -> _Session:
    """The lease session of `saver` in this process (a forked child makes its own)."""
    conn: Any = saver.conn
    if hasattr(conn, "conninfo"):  # a pool
        conninfo = (conn.conninfo, dict(conn.kwargs))
    else:
        info = conn.info
        conninfo = (info.dsn, {"password": info.password} if info.password else {})
    with _sessions_guard:
        session = _sessions.get(saver)
        if session is None or session.pid != os.getpid():
            session = _sessions[saver] = _Session(conninfo)
            weakref.finalize(saver, session.close)
        return session


class _SharedSessionLease(_PostgresLease):
    """The advisory lock on the saver's lease session (`_Session`). Two runs of one thread in this process never
    both ask for it (a session may take its own advisory lock twice): `_Layered`'s local lease comes first, and
    the session is the saver's, as the local lease is."""

    def __init__(self, session: _Session, thread_id: str) -> None:
        super().__init__(None, thread_id)
        self.session = session

    def take(self) -> bool:
        return bool(self.session.run(self._try))

    def give_back(self) -> None:
        import psycopg

        with contextlib.suppress(psycopg.OperationalError):  # the session is gone, and its locks with it
            self.session.run(lambda conn: self._query(conn, "SELECT pg_advisory_unlock(%s)", (self.key,)))


# -- processes --------------------------------------------------------------------------------------------


def _this_process() -> Holder:
    return _process(socket.gethostname(), os.getpid())


@cache  # a process's start time does not change; a forked child asks with its own pid
def _process(host: str, pid: int) -> Holder:
    return Holder(host=host, pid=pid, started=_start_time(pid) or "")


def _running(holder: Holder) -> bool:
    """Whether the process holding a lease still runs. One on another host cannot be seen: it counts as running."""
    if holder.host != socket.gethostname():
        return True
    if holder.pid == os.getpid():
        # This process holds no lease that `_LocalLease` does not know of: a row naming its pid was left by a
        # run that could not give it back (its database failed at the end), or by an earlier process.
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    started = _start_time(holder.pid)
    return started is None or started == holder.started


def _start_time(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (Linux); None where that cannot be read. A zombie
    (killed, not yet reaped by its parent) counts as gone: "" never matches a holder's start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    state, started = fields[0], fields[19]
    return "" if state in ("Z", "X") else started
