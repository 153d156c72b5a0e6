"""Exactly-once effects: the idempotency key of a tool call, and a ledger that makes a re-run a no-op.

A call whose outcome was saved never runs again, but the call in flight when a process dies has no saved
outcome, so a resume runs it again (at-least-once). Every call therefore carries an idempotency key, the
thread id and the call's id, numbered within the thread so that a provider repeating ids across replies
cannot make two calls one. A side-effecting tool reads it with `idempotency_key()` and records it with its
effect, in the same transaction, so that the second run of the same call finds it and changes nothing.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig, ensure_config

from reinloop.sqlite import immediate_transaction

__all__ = ["IDEMPOTENCY_KEY", "EffectLedger", "call_key", "idempotency_key"]

# The configurable key under which execute_tool hands a call's idempotency key to its tool.
IDEMPOTENCY_KEY = "reinloop_idempotency_key"


def call_key(thread_id: str | None, number: int, call_id: str) -> str:
    """The idempotency key of the `number`-th call validated in a thread (the same on every re-run)."""
    return f"{thread_id or '-'}/{number}/{call_id}"


def idempotency_key(config: RunnableConfig | None = None) -> str | None:
    """The idempotency key of the tool call being run, or None outside a reinloop agent.

    Inside a tool, call it without arguments (LangChain hands the tool's config down through a context
    variable), or pass the `config: RunnableConfig` the tool receives.
    """
    return (ensure_config(config).get("configurable") or {}).get(IDEMPOTENCY_KEY)


class EffectLedger:
    """A table of done effects, keyed by idempotency key, in a SQLite database of the tool's own.

    `transaction()` opens one write transaction: look the key up with `done()`, make the effect with the
    same connection, `record()` the key; either all of it is committed or none.
    """

    TABLE = "_reinloop_effects"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.transaction() as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.TABLE} (key TEXT PRIMARY KEY, result TEXT NOT NULL, "
                "detail TEXT, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        # The lookup and the effect share one write lock, so two processes running the same call cannot both
        # miss the key.
        with immediate_transaction(self.path) as conn:
            yield conn

    def done(self, conn: sqlite3.Connection, key: str) -> tuple[str, Any] | None:
        """The recorded result and detail of the effect with `key`, or None when it was not made."""
        row = conn.execute(f"SELECT result, detail FROM {self.TABLE} WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1])

    def record(self, conn: sqlite3.Connection, key: str, result: str, detail: str | None = None) -> None:
        conn.execute(f"INSERT INTO {self.TABLE} (key, result, detail) VALUES (?, ?, ?)", (key, result, detail))
