"""Memory: the bounded short-term window, token counting, summaries, and long-term recall."""

from reinloop.memory.long_term import (
    arecall,
    aremember,
    default_embeddings,
    memory_namespace,
    memory_store,
    recall,
    remember,
    sqlite_memory_store,
)
from reinloop.memory.summary import asummarize, extractive_summary, is_summary_request, summarize
from reinloop.memory.tokens import TokenCounter
from reinloop.memory.window import digest, entry_key, pairing_violations, window_entries

__all__ = [
    "TokenCounter",
    "arecall",
    "aremember",
    "asummarize",
    "default_embeddings",
    "digest",
    "entry_key",
    "extractive_summary",
    "is_summary_request",
    "memory_namespace",
    "memory_store",
    "pairing_violations",
    "recall",
    "remember",
    "sqlite_memory_store",
    "summarize",
    "window_entries",
]
