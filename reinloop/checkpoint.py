"""Saved state on disk: the SQLite checkpointer applications use by default, and what reinloop needs of any
checkpointer to keep its crash-safety promise."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from reinloop.errors import ConfigurationError

__all__ = [
    "check_checkpointer",
    "database_label",
    "is_postgres_url",
    "open_checkpointer",
    "sqlite_checkpointer",
]


def sqlite_checkpointer(path: str | Path) -> SqliteSaver:
    """A `SqliteSaver` on the file at `path` (created with its folder if missing), safe to share between
    the threads of one process. Close it with ``saver.conn.close()`` when done.

    The database runs in WAL mode with ``synchronous=NORMAL``: every step survives a crash or kill of the
    process, and commits skip the fsync that would otherwise dominate a step's cost. Only a power failure
    or OS crash can lose the last few steps, which a resume then runs again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # check_same_thread=False is safe: SqliteSaver serializes access with its own lock.
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = _SqliteSaver(conn)
    saver.setup()  # switches the file to WAL, which synchronous=NORMAL relies on
    conn.execute("PRAGMA synchronous=NORMAL")
    return saver


class _SqliteSaver(SqliteSaver):
    """`SqliteSaver` with channel versions a third shorter.

    Every checkpoint stores a version per channel, and one per channel each node has seen: about half of a
    reinloop checkpoint's bytes. `SqliteSaver` writes ``<32 digits>.<random fraction>``; the random part keeps
    versions apart on forked branches where a saver keys stored values by version, which SQLite does not
    (values live inside their checkpoint). The 32 digits stay, so either saver can continue a thread the other
    saved: each takes the number before the dot and adds one, and the results compare as LangGraph expects.
    """

    def get_next_version(self, current: str | None, channel: None) -> str:
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}"


@contextlib.contextmanager
def open_checkpointer(db: str | Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """A checkpointer on a SQLite file path or a ``postgresql://`` URL, set up, and closed afterwards.

    PostgreSQL needs the `postgres` extra (``pip install 'reinloop[postgres]'``).
    """
    text = str(db)
    if is_postgres_url(text):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            raise ConfigurationError(
                "a PostgreSQL checkpointer needs the postgres extra: pip install 'reinloop[postgres]'"
            ) from None
        with PostgresSaver.from_conn_string(text) as postgres:
            postgres.setup()
            yield postgres
        return
    saver = sqlite_checkpointer(db)
    try:
        yield saver
    finally:
        saver.conn.close()


def is_postgres_url(db: str | Path) -> bool:
    """Whether `open_checkpointer` reads `db` as a PostgreSQL URL rather than a SQLite file path."""
    return str(db).startswith(("postgresql://", "postgres://"))


def database_label(db: str | Path) -> str:
    """`db` as it may be printed or logged: the path, or the URL with its password hidden."""
    url = urlsplit(str(db))
    if not is_postgres_url(db) or url.password is None:
        return str(db)
    user, _, host = url.netloc.rpartition("@")
    return url._replace(netloc=f"{user.partition(':')[0]}:***@{host}").geturl()


def check_checkpointer(saver: BaseCheckpointSaver[Any]) -> None:
    """Refuse a checkpointer that would silently lose steps.

    LangGraph saves checkpoints from a background thread. A `SqliteSaver` on a connection opened with
    sqlite3's default ``check_same_thread=True`` (the plain ``sqlite3.connect(path)``) fails on every save
    from that thread: under async durability nothing is saved until the run ends, so a killed run loses
    every step.
    """
    if not isinstance(saver, SqliteSaver):
        return
    failure: list[BaseException] = []

    def probe() -> None:
        try:
            with saver.lock:
                saver.conn.execute("SELECT 1").fetchall()
        except sqlite3.ProgrammingError as exc:
            failure.append(exc)

    thread = threading.Thread(target=probe, name="reinloop-saver-check")
    thread.start()
    thread.join()
    if failure:
        raise ConfigurationError(
            "the SqliteSaver's connection can only be used from the thread that opened it, but LangGraph saves "
            "checkpoints from a background thread, so no step would be saved. Open it with "
            "sqlite3.connect(path, check_same_thread=False), or use reinloop.sqlite_checkpointer(path)."
        )
