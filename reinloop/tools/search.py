"""web_search: ranked snippets with their sources, from a pluggable backend.

The offline default searches a local folder of text and Markdown documents with SQLite's FTS5 full-text
index (BM25 ranking), so agents can look things up with no network. A backend for a real web search API
only has to implement `SearchBackend.search`.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.errors import ConfigurationError
from reinloop.tools.registry import POLICY_KEY

__all__ = ["BUNDLED_CORPUS", "LocalCorpusSearch", "SearchBackend", "SearchHit", "WebSearchTool"]

MAX_QUERY_CHARS = 50  # the seeds' limit: short keyword queries search best
DOCUMENT_SUFFIXES = (".md", ".txt", ".rst")
MAX_DOCUMENT_BYTES = 2_000_000
BUNDLED_CORPUS = Path(str(resources.files("reinloop.tools") / "data" / "corpus"))  # installed as files
_WORD = re.compile(r"\w+", re.UNICODE)
# Words that match nearly every passage and only blur the ranking.
_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "in", "is", "it", "its", "of",
        "on", "or", "the", "to", "was", "what", "when", "where", "which", "who", "why", "with",
    }
)  # fmt: skip


@dataclass(frozen=True)
class SearchHit:
    title: str
    source: str
    snippet: str


class SearchBackend(Protocol):
    def search(self, query: str, max_results: int) -> list[SearchHit]:
        """The best hits for `query`, best first; an empty list when nothing matches."""
        ...


class LocalCorpusSearch:
    """Full-text search over the documents in a folder (``.md``, ``.txt``, ``.rst``, recursively).

    The index is an in-memory SQLite FTS5 table, built on first use and rebuilt when a file is added,
    removed or changed. Each paragraph is indexed on its own, so snippets stay on topic.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ConfigurationError(f"search corpus folder {str(self.folder)!r} does not exist")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._fingerprint: tuple[tuple[str, float, int], ...] = ()

    def search(self, query: str, max_results: int) -> list[SearchHit]:
        words = [word for word in _WORD.findall(query.lower()) if word not in _STOPWORDS] or _WORD.findall(
            query.lower()
        )
        if not words:
            raise ToolException(f"the query {query!r} has no words to search for")
        # Each word quoted: the model's text is matched as words, never parsed as FTS5 query syntax.
        match = " OR ".join('"' + word.replace('"', "") + '"' for word in dict.fromkeys(words))
        with self._lock:
            conn = self._index()
            rows = conn.execute(
                "SELECT title, source, snippet(passages, 2, '', '', ' ... ', 32) FROM passages "
                "WHERE passages MATCH ? ORDER BY bm25(passages, 0.5, 0.0, 1.0) LIMIT ?",
                (match, max_results),
            ).fetchall()
        return [SearchHit(title, source, " ".join(snippet.split())) for title, source, snippet in rows]

    def _index(self) -> sqlite3.Connection:
        files = sorted(
            path
            for path in self.folder.rglob("*")
            if path.suffix.lower() in DOCUMENT_SUFFIXES and path.is_file() and path.stat().st_size <= MAX_DOCUMENT_BYTES
        )
        fingerprint = tuple((str(path), path.stat().st_mtime, path.stat().st_size) for path in files)
        if self._conn is not None and fingerprint == self._fingerprint:
            return self._conn
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        # porter: "boiling" finds "boils"; unicode61: words in any script.
        conn.execute(
            "CREATE VIRTUAL TABLE passages USING fts5(title, source UNINDEXED, body, tokenize='porter unicode61')"
        )
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            title = _title(text, path)
            source = path.relative_to(self.folder).as_posix()
            for paragraph in re.split(r"\n\s*\n", text):
                body = " ".join(paragraph.split())
                if body and not body.startswith("#"):
                    conn.execute("INSERT INTO passages VALUES (?, ?, ?)", (title, source, body))
        conn.commit()
        if self._conn is not None:
            self._conn.close()
        self._conn, self._fingerprint = conn, fingerprint
        return conn


def _title(text: str, path: Path) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return path.stem.replace("_", " ")


class WebSearchInput(BaseModel):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="A few keywords, under 50 characters.")
    max_results: int = Field(5, ge=1, le=10, description="How many results to return, 1-10.")


class WebSearchTool(BaseTool):
    """Search for information and get ranked snippets with their sources."""

    name: str = "web_search"
    description: str = (
        "Search for facts. Returns up to max_results snippets, best first, each with its title and source. "
        "Use short keyword queries."
    )
    args_schema: type[BaseModel] = WebSearchInput
    # A search only reads: safe to retry in place.
    metadata: dict[str, Any] | None = Field(default_factory=lambda: {POLICY_KEY: {"retryable": True}})
    backend: Any

    def _run(self, query: str, max_results: int = 5, **_: Any) -> list[dict[str, str]]:
        hits = self.backend.search(query, max_results)
        return [{"title": hit.title, "source": hit.source, "snippet": hit.snippet} for hit in hits]
