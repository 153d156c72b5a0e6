"""The tables prune works on, as one interface (`_Tables`) that each database implements: LangGraph's
checkpoint tables, whose columns are checked before a prune, and reinloop's marks table (`Mark`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any, Protocol

from reinloop._langgraph import SUPPORTED
from reinloop.errors import ConfigurationError

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


# Each thread's latest checkpoint (of its root namespace), the most recently saved first: checkpoint ids are
# time-ordered (uuid6). The statement is valid SQLite and PostgreSQL alike.
LATEST_SQL = (
    "SELECT thread_id, MAX(checkpoint_id) AS latest FROM checkpoints WHERE checkpoint_ns = '' "
    "GROUP BY thread_id ORDER BY latest DESC"
)


@dataclass(frozen=True)
class Mark:
    """A checkpoint that `prune` keeps, with the user's label for it."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    label: str


@contextlib.contextmanager
def _released(lock: Lock) -> Iterator[None]:
    """`lock`, held by the caller, released for a while: the saver's own calls take it."""
    lock.release()
    try:
        yield
    finally:
        lock.acquire()


class _Tables(Protocol):
    """LangGraph's checkpoint tables and reinloop's marks in one database; ids are (thread, namespace,
    checkpoint ids). Every statement takes its values as parameters."""

    def transaction(self, *, commit: bool) -> contextlib.AbstractContextManager[None]: ...
    def thread_ids(self) -> list[str]: ...
    def latest(self) -> list[tuple[str, str]]: ...
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
