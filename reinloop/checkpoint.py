"""Saved state on disk: the SQLite checkpointer applications use by default."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["sqlite_checkpointer"]


def sqlite_checkpointer(path: str | Path) -> SqliteSaver:
    """A `SqliteSaver` on the file at `path` (created with its folder if missing), safe to share between
    the threads of one process. Close it with ``saver.conn.close()`` when done."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # check_same_thread=False is safe: SqliteSaver serializes access with its own lock.
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
