"""file_read / file_write: text files confined to a workspace folder.

Paths are relative to the workspace. Absolute paths, and `..` or symlinks that lead outside it, are refused;
reads and writes are size-limited, and writes are atomic (a temporary file renamed into place), so a
crash never leaves half a file.

A write is made exactly once per call: before it, the call's idempotency key is recorded in the workspace's
ledger with the file's content hash before and after; a re-run of the same call finds the key and writes
only if the file still has its content from before (the first run died before its rename), so an append
is never appended twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field

from reinloop.tools.effects import EffectLedger, idempotency_key
from reinloop.tools.registry import POLICY_KEY

__all__ = ["FileReadTool", "FileWriteTool", "Workspace"]

MAX_READ_BYTES = 256_000
MAX_WRITE_CHARS = 100_000
MAX_PATH_CHARS = 255
# reinloop's own files in the workspace (the write ledger); the agent's tools may not touch them.
PRIVATE_FOLDER = ".reinloop"


class Workspace:
    """A folder the agent's file tools may not leave."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._ledger: EffectLedger | None = None

    @property
    def ledger(self) -> EffectLedger:
        """The record of writes made, by idempotency key (created on first use)."""
        if self._ledger is None:
            self._ledger = EffectLedger(self.root / PRIVATE_FOLDER / "effects.sqlite")
        return self._ledger

    def resolve(self, path: str) -> Path:
        """The real location of `path`, which must stay inside the workspace once symlinks are followed."""
        if not path.strip() or "\x00" in path:
            raise ToolException("the path is empty or contains a NUL character")
        relative = Path(path)
        if relative.is_absolute() or relative.drive:
            raise ToolException(f"{path!r} is absolute; use a path relative to the workspace, e.g. 'notes/todo.txt'")
        target = (self.root / relative).resolve()
        if not target.is_relative_to(self.root):
            raise ToolException(f"{path!r} leads outside the workspace; use a path inside it")
        if target.relative_to(self.root).parts[:1] == (PRIVATE_FOLDER,):
            raise ToolException(f"{path!r} is in reinloop's private folder {PRIVATE_FOLDER!r}; use another path")
        return target

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"


class FileReadInput(BaseModel):
    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS, description="File path relative to the workspace.")


class FileWriteInput(BaseModel):
    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS, description="File path relative to the workspace.")
    content: str = Field(max_length=MAX_WRITE_CHARS, description="The text to write (UTF-8).")
    mode: Literal["overwrite", "append"] = Field(
        "overwrite", description="'overwrite' replaces the file, 'append' adds to its end."
    )


class FileReadTool(BaseTool):
    """Read a UTF-8 text file from the workspace."""

    name: str = "file_read"
    description: str = f"Read a text file from the workspace (up to {MAX_READ_BYTES // 1000} KB)."
    args_schema: type[BaseModel] = FileReadInput
    # file_write changes what it reads: an identical call runs again rather than being answered from cache.
    # A read: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"cacheable": False, "retryable": True}}
    )
    workspace: Workspace

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def _run(self, path: str, **_: Any) -> str:
        target = self.workspace.resolve(path)
        if not target.exists():
            raise ToolException(f"{path!r} does not exist; write it first or check the name")
        if not target.is_file():
            raise ToolException(f"{path!r} is not a file")
        size = target.stat().st_size
        if size > MAX_READ_BYTES:
            raise ToolException(f"{path!r} is {size} bytes; files over {MAX_READ_BYTES} bytes cannot be read")
        try:
            return target.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ToolException(f"{path!r} is not a UTF-8 text file") from None


class FileWriteTool(BaseTool):
    """Write a UTF-8 text file in the workspace, atomically."""

    name: str = "file_write"
    description: str = (
        "Write text to a file in the workspace, creating folders as needed. Overwrites unless mode is 'append'."
    )
    args_schema: type[BaseModel] = FileWriteInput
    workspace: Workspace

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def _run(self, path: str, content: str, config: RunnableConfig, mode: str = "overwrite", **_: Any) -> str:
        if len(content) > MAX_WRITE_CHARS:
            raise ToolException(f"the content is {len(content)} characters; the limit is {MAX_WRITE_CHARS}")
        target = self.workspace.resolve(path)
        if target.is_dir():
            raise ToolException(f"{path!r} is a folder; give a file name")
        key = idempotency_key(config)
        if key is None:
            return self._write(target, self._new_content(target, content, mode))
        ledger = self.workspace.ledger
        with ledger.transaction() as conn:
            done = ledger.done(conn, key)
            if done is None:
                new = self._new_content(target, content, mode)
                # Recorded before the write: if the process dies between the two, the re-run finds the key
                # and the file as it was before, and writes then.
                result = self._describe(target, new)
                ledger.record(conn, key, result, json.dumps({"path": str(target), "before": _content_hash(target)}))
        if done is None:
            return self._write(target, new)
        result, detail = done
        if _content_hash(target) == json.loads(detail)["before"]:
            # The first run recorded the key but died before its rename; the content it meant to write is
            # computed again from the same file.
            return self._write(target, self._new_content(target, content, mode))
        return result

    def _new_content(self, target: Path, content: str, mode: str) -> str:
        if mode == "append" and target.exists():
            content = target.read_text(encoding="utf-8") + content
            if len(content) > MAX_WRITE_CHARS:
                raise ToolException(f"the file would grow to {len(content)} characters; the limit is {MAX_WRITE_CHARS}")
        return content

    def _write(self, target: Path, content: str) -> str:
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(target, content)
        return self._describe(target, content)

    def _describe(self, target: Path, content: str) -> str:
        return f"wrote {len(content)} characters to {target.relative_to(self.workspace.root).as_posix()}"


def _content_hash(target: Path) -> str | None:
    """The SHA-256 of a file's bytes, None when it does not exist."""
    try:
        return hashlib.sha256(target.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _atomic_write(target: Path, content: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
