"""Saved state on disk: the SQLite checkpointer applications use by default, and what reinloop needs of any
checkpointer to keep its crash-safety promise."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

from reinloop.errors import CheckpointError, ConfigurationError, ReinloopError
from reinloop.lease import LEASES_TABLE

__all__ = [
    "DAMAGED_TEMPLATE",
    "SQLITE_TABLES",
    "aopen_checkpointer",
    "check_checkpointer",
    "database_label",
    "is_postgres_url",
    "is_unreadable",
    "open_checkpointer",
    "read_only_checkpointer",
    "sqlite_checkpointer",
]

# The tables LangGraph's `SqliteSaver` makes. A file with other tables is another application's database, which
# must not get these added. (Their columns are LangGraph's version's to decide; `prune` checks those it uses.)
SQLITE_TABLES = ("checkpoints", "writes")
DAMAGED_TEMPLATE = (
    "{thread} in {path} cannot be read: a saved checkpoint is damaged ({error}). Nothing was changed; start a "
    "new thread, or restore the file from a backup"
)
_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
# SQLite's primary result codes for a file that is no database, or one whose pages are damaged.
_DAMAGED_SQLITE = {sqlite3.SQLITE_NOTADB: "not a SQLite database", sqlite3.SQLITE_CORRUPT: "a damaged SQLite database"}
# What reading a damaged row raises: the serializer's and json's errors on bad bytes (NotImplementedError for an
# unknown type tag), and LangGraph's own where the bytes decode to something other than what it saved.
_DECODING_ERRORS = (ValueError, TypeError, LookupError, AttributeError, NotImplementedError)
# How long a read-only connection waits for a lock. Readers of a WAL file never wait for a writer's transaction,
# only for the rare moment a writer resets the WAL: a page read waits that long, never a writer's whole step.
READ_WAIT_S = 1.0
# The parts of a checkpoint LangGraph reads as mappings.
_CHECKPOINT_MAPPINGS = ("channel_values", "channel_versions", "versions_seen")


def sqlite_checkpointer(path: str | Path) -> SqliteSaver:
    """A `SqliteSaver` on the file at `path` (created with its folder if missing), safe to share between
    the threads of one process. Close it with ``saver.conn.close()`` when done.

    The database runs in WAL mode with ``synchronous=NORMAL``: every step survives a crash or kill of the
    process, and commits skip the fsync that would otherwise dominate a step's cost. Only a power failure
    or OS crash can lose the last few steps, which a resume then runs again.

    A folder, or a file that is not a LangGraph checkpoint database (another application's database, or no
    SQLite database at all), raises `CheckpointError` before anything writes to it; so does reading a thread
    whose saved checkpoint is damaged.
    """
    path = Path(path)
    _check_sqlite_file(path)
    saver = _SqliteSaver(_connected(path), path)
    try:
        saver.setup()  # switches the file to WAL, which synchronous=NORMAL relies on
        saver.conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        saver.conn.close()
        raise CheckpointError(f"cannot set up the SQLite database at {path}: {_one_line(exc)}") from exc
    return saver


def _check_sqlite_file(path: Path) -> None:
    """Refuse a folder, or a file that is not a LangGraph checkpoint database, without writing to it (`setup`
    would switch any SQLite file to WAL and add LangGraph's tables). A missing or empty file is a new database."""
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a folder, not a SQLite database file: name a file, such as {path / 'runs.sqlite'}"
        )
    if not path.exists() or path.stat().st_size == 0:
        return
    problem = _schema_problem(_sqlite_tables(path))
    if problem is not None:
        raise CheckpointError(f"cannot use {path} as a checkpoint database: {problem}. Nothing was changed")


def _sqlite_tables(path: Path) -> set[str]:
    """The tables of the SQLite file at `path`, read on a read-only connection."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return {row[0] for row in conn.execute(_TABLES_SQL)}
    except sqlite3.Error as exc:
        what = _DAMAGED_SQLITE.get(_primary_code(exc), "unreadable")
        raise CheckpointError(
            f"cannot use {path} as a checkpoint database: it is {what} ({_one_line(exc)}). Nothing was changed"
        ) from exc


def _schema_problem(tables: set[str]) -> str | None:
    """Why a SQLite database with `tables` is not LangGraph's; None if it is, or is new."""
    if not tables - {LEASES_TABLE}:
        return None  # new, or a run took its thread's lease before a lazy saver made LangGraph's tables
    if not tables & set(SQLITE_TABLES):
        shown = ", ".join(repr(name) for name in sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        ours = " and ".join(repr(name) for name in SQLITE_TABLES)
        return f"it is another application's database (tables {shown}), without LangGraph's {ours} tables"
    missing = [name for name in SQLITE_TABLES if name not in tables]
    return f"it has no {missing[0]!r} table, which LangGraph's databases have" if missing else None


def _connected(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False is safe: SqliteSaver serializes access with its own lock.
        return sqlite3.connect(path, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise CheckpointError(f"cannot create or open the SQLite database at {path}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def is_unreadable(exc: BaseException) -> bool:
    """Whether `exc`, raised while saved checkpoints were read, says a saved row is damaged (rather than that
    the database is busy, closed or full)."""
    if isinstance(exc, sqlite3.Error):
        return _primary_code(exc) in _DAMAGED_SQLITE
    return isinstance(exc, _DECODING_ERRORS) and not isinstance(exc, ReinloopError)


def _primary_code(exc: sqlite3.Error) -> int:
    """SQLite's result code for `exc` without its extended part (0 for an error Python raised itself)."""
    code: int = getattr(exc, "sqlite_errorcode", 0)
    return code & 0xFF


class _SqliteSaver(SqliteSaver):
    """`SqliteSaver` with channel versions a third shorter.

    Every checkpoint stores a version per channel, and one per channel each node has seen: about half of a
    reinloop checkpoint's bytes. `SqliteSaver` writes ``<32 digits>.<random fraction>``; the random part keeps
    versions apart on forked branches where a saver keys stored values by version, which SQLite does not
    (values live inside their checkpoint). The 32 digits stay, so either saver can continue a thread the other
    saved: each takes the number before the dot and adds one, and the results compare as LangGraph expects.

    Reading a row that does not read back as LangGraph saved it raises `CheckpointError` naming the thread.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        super().__init__(conn)
        self.path = path

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self._reading(config):
            found = super().get_tuple(config)
            return None if found is None else _checked(found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        # SqliteSaver.list is a generator that holds the saver's lock until it ends: closed here, since a
        # traceback from `_checked` would keep it open, and every later read of the saver would wait.
        listed = cast(Generator[CheckpointTuple], super().list(config, filter=filter, before=before, limit=limit))
        with self._reading(config), contextlib.closing(listed):
            for found in listed:
                yield _checked(found)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        with self._reading(config):
            return super().get_delta_channel_history(config=config, channels=channels)

    @contextlib.contextmanager
    def _reading(self, config: RunnableConfig | None) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            if not is_unreadable(exc):
                raise
            thread = ((config or {}).get("configurable") or {}).get("thread_id")
            where = "a thread" if thread is None else f"thread {thread!r}"
            error = f"{type(exc).__name__}: {_one_line(exc)}"
            raise CheckpointError(DAMAGED_TEMPLATE.format(thread=where, path=self.path, error=error)) from exc

    def get_next_version(self, current: str | None, channel: None) -> str:
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}"


def _checked(found: CheckpointTuple) -> CheckpointTuple:
    """`found`, once its checkpoint and metadata are the records LangGraph saves (damaged bytes can decode to
    any value, which LangGraph would fail on later, far from the row)."""
    checkpoint: Any = found.checkpoint
    if not isinstance(checkpoint, dict) or not all(
        isinstance(checkpoint.get(key), dict) for key in _CHECKPOINT_MAPPINGS
    ):
        raise ValueError(
            f"the checkpoint reads back as {type(checkpoint).__name__!r}, not as LangGraph's checkpoint record"
        )
    if not isinstance(found.metadata, dict):
        raise ValueError(f"the metadata reads back as {type(found.metadata).__name__!r}, not as a mapping")
    return found


@contextlib.contextmanager
def open_checkpointer(db: str | Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """A checkpointer on a SQLite file path or a ``postgresql://`` URL, set up, and closed afterwards.

    PostgreSQL needs the `postgres` extra (``pip install 'reinloop[postgres]'``).
    """
    text = str(db)
    if is_postgres_url(text):
        with _postgres_checkpointer(text) as postgres:
            yield postgres
        return
    saver = sqlite_checkpointer(db)
    try:
        yield saver
    finally:
        saver.conn.close()


@contextlib.contextmanager
def read_only_checkpointer(db: str | Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """A checkpointer that only reads `db` (a SQLite path or a ``postgresql://`` URL), closed afterwards: what a
    reader beside running writers (`reinloop inspect`) opens.

    SQLite: a read-only connection that sets nothing up and waits at most `READ_WAIT_S` for a lock, so it reads
    the last committed checkpoint while a run writes; a file without LangGraph's tables yet reads as empty.
    PostgreSQL's readers never wait for writers: it is `open_checkpointer`'s saver.
    """
    if is_postgres_url(db):
        with open_checkpointer(db) as postgres:
            yield postgres
        return
    path = Path(db)
    _check_sqlite_file(path)
    saver = _SqliteSaver(_read_only(path), path)
    try:
        _set_up_for_reading(saver)
        yield saver
    finally:
        saver.conn.close()


def _read_only(path: Path) -> sqlite3.Connection:
    if not path.exists() or not set(SQLITE_TABLES) <= _sqlite_tables(path):
        return sqlite3.connect(":memory:", check_same_thread=False)  # nothing saved yet: read as empty
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        # check_same_thread=False is safe: SqliteSaver serializes access with its own lock.
        return sqlite3.connect(uri, uri=True, timeout=READ_WAIT_S, check_same_thread=False)
    except sqlite3.Error as exc:
        raise CheckpointError(f"cannot read the SQLite database at {path}: {_one_line(exc)}") from exc


def _set_up_for_reading(saver: _SqliteSaver) -> None:
    """Make `saver` read without `setup`, which would write (switch to WAL, add LangGraph's tables and columns)."""
    tables = {row[0] for row in saver.conn.execute(_TABLES_SQL)}
    if not tables:
        saver.setup()  # the empty in-memory stand-in
        return
    columns = {row[0] for row in saver.conn.execute("SELECT name FROM pragma_table_info('writes')")}
    saver._has_task_path = "task_path" in columns  # as `setup` finds it on a read-only file
    saver.is_setup = True


_NEEDS_POSTGRES = "a PostgreSQL checkpointer needs the postgres extra: pip install 'reinloop[postgres]'"


def _cannot_use_postgres(url: str, exc: Exception) -> CheckpointError:
    # libpq's messages name the host and user, never the password
    return CheckpointError(f"cannot use the PostgreSQL database at {database_label(url)}: {_one_line(exc)}")


@contextlib.contextmanager
def _postgres_checkpointer(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise ConfigurationError(_NEEDS_POSTGRES) from None
    with contextlib.ExitStack() as stack:
        try:
            postgres = stack.enter_context(PostgresSaver.from_conn_string(url))
            postgres.setup()
        except psycopg.Error as exc:
            raise _cannot_use_postgres(url, exc) from exc
        yield postgres


@contextlib.asynccontextmanager
async def aopen_checkpointer(db: str | Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """`open_checkpointer`'s async twin, for `ainvoke`: an `AsyncSqliteSaver` on a SQLite path or an
    `AsyncPostgresSaver` on a ``postgresql://`` URL (the `postgres` extra), set up, and closed afterwards."""
    if is_postgres_url(db):
        try:
            import psycopg
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError:
            raise ConfigurationError(_NEEDS_POSTGRES) from None
        async with contextlib.AsyncExitStack() as stack:
            try:
                postgres = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(str(db)))
                await postgres.setup()
            except psycopg.Error as exc:
                raise _cannot_use_postgres(str(db), exc) from exc
            yield postgres
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()
        yield saver


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
