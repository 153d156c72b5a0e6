"""Saved state on disk: the SQLite checkpointer applications use by default."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["sqlite_checkpointer"]


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
    saver = SqliteSaver(conn)
    saver.setup()  # switches the file to WAL, which synchronous=NORMAL relies on
    conn.execute("PRAGMA synchronous=NORMAL")
    return saver
