"""One write transaction on a SQLite file, on a connection of its own: what reinloop's own tables (the lease
rows, the tools' effect ledger) need beside a saver's connection."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

__all__ = ["checkpoint_wal", "immediate_transaction"]


@contextlib.contextmanager
def immediate_transaction(path: str | Path, timeout_s: float = 30.0) -> Iterator[sqlite3.Connection]:
    """A connection to the file at `path` inside a write transaction, committed when the block ends and rolled
    back if it raises. BEGIN IMMEDIATE takes the write lock first (waiting up to `timeout_s` for another
    process's), so a read and the write that depends on it are one step: two processes never both find a row
    missing and both write it."""
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def checkpoint_wal(path: str | Path) -> bool:
    """Copy the WAL of the database at `path` back into it and truncate the -wal file, if no other connection is
    reading or writing right now (no wait: a busy database keeps its WAL until the next try); whether it did."""
    try:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return not busy
