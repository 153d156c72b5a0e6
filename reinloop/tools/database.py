"""db_insert / db_query: a real SQLite database in the workspace.

Inserts go into tables declared when the toolset is built, with values bound as parameters; the model
picks a table and columns only from the declared names. Each insert records the call's idempotency key in
the same transaction, so a call re-run after a crash inserts nothing and answers as the first run did.
Queries run on a read-only connection whose authorizer allows reading and nothing else, one statement at a
time, with a row limit and a work limit.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, create_model

from reinloop.errors import ConfigurationError
from reinloop.tools.effects import EffectLedger, idempotency_key
from reinloop.tools.registry import POLICY_KEY

__all__ = ["DEFAULT_TABLES", "Database", "DbInsertTool", "DbQueryTool"]

DEFAULT_TABLES: dict[str, tuple[str, ...]] = {
    "notes": ("title", "body"),
    "contacts": ("name", "email", "phone"),
    "expenses": ("item", "amount", "currency", "spent_on"),
}
MAX_SQL_CHARS = 2_000
MAX_ROWS = 100
MAX_VALUE_CHARS = 10_000
QUERY_STEPS = 5_000_000  # SQLite VM instructions one query may take before it is stopped
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# What a read-only query may do: read columns, select, call functions, recursive CTEs.
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


class Database:
    """A SQLite file with declared tables: each has an `id`, a `created_at` time and its declared columns."""

    def __init__(self, path: str | Path, tables: Mapping[str, Sequence[str]] = DEFAULT_TABLES) -> None:
        if not tables:
            raise ConfigurationError("declare at least one table")
        for table, columns in tables.items():
            bad = [name for name in (table, *columns) if not _IDENTIFIER.match(name)]
            if bad or not columns:
                raise ConfigurationError(
                    f"table {table!r}: names must be identifiers and columns non-empty, bad: {bad}"
                )
            if {"id", "created_at"} & set(columns):
                raise ConfigurationError(f"table {table!r}: 'id' and 'created_at' are added automatically")
        if EffectLedger.TABLE in tables:
            raise ConfigurationError(f"the table name {EffectLedger.TABLE!r} is reserved by reinloop")
        self.path = Path(path)
        self.tables = {table: tuple(columns) for table, columns in tables.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ledger = EffectLedger(self.path)
        with sqlite3.connect(self.path) as conn:
            for table, columns in self.tables.items():
                # Identifiers come from the developer's declaration, checked above, never from the model.
                column_sql = ", ".join(f'"{column}"' for column in columns)
                conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{table}" (id INTEGER PRIMARY KEY, {column_sql}, '
                    "created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
                )
        conn.close()

    def insert(self, table: str, values: Mapping[str, Any], key: str | None = None) -> int:
        """Insert a row and return its id. With an idempotency `key` that was already used, insert nothing
        and return the id of the row that the first call with that key inserted."""
        columns = self.tables.get(table)
        if columns is None:
            raise ToolException(f"unknown table {table!r}; tables: {', '.join(self.tables)}")
        unknown = [name for name in values if name not in columns]
        if unknown or not values:
            raise ToolException(f"table {table!r} has the columns {list(columns)}; got {list(values)}")
        names = [column for column in columns if column in values]  # declared spelling, declared order
        quoted = ", ".join(f'"{name}"' for name in names)
        placeholders = ", ".join("?" for _ in names)
        sql = f'INSERT INTO "{table}" ({quoted}) VALUES ({placeholders})'
        with self.ledger.transaction() as conn:
            if key is not None and (done := self.ledger.done(conn, key)) is not None:
                return int(done[0])
            rowid = int(conn.execute(sql, [values[name] for name in names]).lastrowid or 0)
            if key is not None:
                self.ledger.record(conn, key, str(rowid), table)
        return rowid

    def query(self, sql: str, max_rows: int) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        """Columns, at most `max_rows` rows, and whether more rows were left out."""
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn.set_authorizer(_read_only)
            steps = iter(range(QUERY_STEPS // 1000))
            conn.set_progress_handler(lambda: next(steps, None) is None, 1000)
            try:
                cursor = conn.execute(sql)
                rows = cursor.fetchmany(max_rows + 1)
            except sqlite3.ProgrammingError as exc:  # several statements
                raise ToolException(f"{exc} Send a single SELECT statement.") from None
            except sqlite3.DatabaseError as exc:
                raise ToolException(_query_error(exc, self.tables)) from None
            columns = [description[0] for description in cursor.description or ()]
            return columns, rows[:max_rows], len(rows) > max_rows
        finally:
            conn.close()


def _read_only(action: int, table: str | None, *_: Any) -> int:
    if action == sqlite3.SQLITE_READ and table == EffectLedger.TABLE:
        return sqlite3.SQLITE_DENY  # reinloop's bookkeeping, not the agent's data
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _query_error(exc: sqlite3.DatabaseError, tables: Mapping[str, Sequence[str]]) -> str:
    text = str(exc)
    if "not authorized" in text:
        return "only SELECT queries are allowed: the database is read-only for queries; use db_insert to add rows"
    if "interrupted" in text:
        return f"the query took too long (over {QUERY_STEPS:,} steps); add a WHERE clause or a LIMIT"
    schema = "; ".join(f"{table}(id, {', '.join(columns)}, created_at)" for table, columns in tables.items())
    return f"{text}. The tables are: {schema}"


def insert_input_model(tables: Mapping[str, Sequence[str]]) -> type[BaseModel]:
    """The db_insert arguments, with the declared table names as an enum the model sees."""
    listing = "; ".join(f"{table}: {', '.join(columns)}" for table, columns in tables.items())
    table_names: Any = Literal[tuple(tables)]  # built at run time, so a type checker cannot follow it
    return create_model(
        "DbInsertInput",
        table=(table_names, Field(description=f"The table. Tables and their columns: {listing}.")),
        values=(
            dict[str, str | int | float | None],
            Field(min_length=1, description="Column name -> value for the new row; only the table's columns."),
        ),
    )


class DbInsertTool(BaseTool):
    """Insert one row into a declared table."""

    name: str = "db_insert"
    description: str = "Insert one row into a table of the workspace database. Returns the new row's id."
    args_schema: type[BaseModel]
    database: Database

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init__(self, database: Database, **kwargs: Any) -> None:
        super().__init__(database=database, args_schema=insert_input_model(database.tables), **kwargs)

    def _run(self, table: str, values: dict[str, Any], config: RunnableConfig, **_: Any) -> str:
        for column, value in values.items():
            if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
                raise ToolException(f"the value for {column!r} is over {MAX_VALUE_CHARS} characters")
        rowid = self.database.insert(table, values, key=idempotency_key(config))
        return f"inserted row {rowid} into {table}"


class DbQueryInput(BaseModel):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS, description="One read-only SELECT statement.")
    max_rows: int = Field(20, ge=1, le=MAX_ROWS, description=f"Most rows to return, 1-{MAX_ROWS}.")


QUERY_DESCRIPTION = "Query the workspace database with one SELECT statement; returns the rows as JSON objects."


class DbQueryTool(BaseTool):
    """Run one read-only SELECT on the workspace database."""

    name: str = "db_query"
    description: str = QUERY_DESCRIPTION
    args_schema: type[BaseModel] = DbQueryInput
    # db_insert changes what it reads: an identical call runs again rather than being answered from cache.
    # Its connection is read-only: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"cacheable": False, "retryable": True}}
    )
    database: Database

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init__(self, database: Database, **kwargs: Any) -> None:
        tables = "; ".join(f"{t}(id, {', '.join(c)}, created_at)" for t, c in database.tables.items())
        super().__init__(database=database, description=f"{QUERY_DESCRIPTION} Tables: {tables}.", **kwargs)

    def _run(self, sql: str, max_rows: int = 20, **_: Any) -> dict[str, Any]:
        columns, rows, more = self.database.query(sql, max_rows)
        result: dict[str, Any] = {"rows": [dict(zip(columns, row, strict=True)) for row in rows]}
        if more:
            result["note"] = f"more rows matched; only the first {max_rows} are shown"
        return result
