"""BFCL in an environment of its own, and the bridge to it: `install` makes the environment, `Bfcl` runs BFCL's
code there in a worker process (`worker.py`) and asks it, one JSON line at a time, to load a category, run calls
in a multi-turn entry's environments, and score a run with BFCL's checkers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import platformdirs

__all__ = ["BFCL_VERSION", "PYTHON_VARIABLE", "REQUIREMENTS", "Bfcl", "BfclError", "bfcl_python", "install"]

BFCL_VERSION = "2026.3.23"
# What the worker imports, at the versions bfcl-eval pins or resolves to: BFCL's loader, data, tool conversion,
# multi-turn environments and checkers. Installed without their dependencies: bfcl-eval requires the SDKs of
# every model on its leaderboard, sentence-transformers and torch (6 GB in all), and pins numpy 1.26, networkx
# 3.3, filelock 3.20 and tenacity 9.1, below what reinloop's environment has (tenacity below reinloop's range), so
# it cannot share that environment; the seven packages below take 50 MB and five seconds to install.
REQUIREMENTS = (
    f"bfcl-eval=={BFCL_VERSION}",
    "filelock==3.20.0",
    "mpmath==1.3.0",
    "tenacity==9.1.4",
    "tree-sitter==0.21.3",
    "tree-sitter-java==0.21.0",
    "tree-sitter-javascript==0.21.4",
)
# A Python with bfcl_eval installed to use instead of the environment `install` makes (a full install, say).
PYTHON_VARIABLE = "REINLOOP_BFCL_PYTHON"
WORKER = Path(__file__).with_name("worker.py")
STOP_WAIT_S = 5.0


class BfclError(RuntimeError):
    """BFCL's worker could not do what it was asked (its message says why), or stopped."""


def default_folder() -> Path:
    return platformdirs.user_cache_path("reinloop") / f"bfcl-{BFCL_VERSION}"


def install(folder: Path | None = None) -> Path:
    """The Python of BFCL's environment in `folder` (by default in reinloop's cache folder), made first if it
    is not there: a virtual environment with `REQUIREMENTS`, built aside and moved into place when complete."""
    folder = folder or default_folder()
    python = folder / "bin" / "python"
    if python.exists():
        return python
    staging = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
    pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    subprocess.run([*pip, *REQUIREMENTS], check=True)
    try:
        staging.rename(folder)
    except OSError:  # another process installed it meanwhile: use theirs
        shutil.rmtree(staging, ignore_errors=True)
    return python


def bfcl_python() -> Path:
    """The Python that runs BFCL: `REINLOOP_BFCL_PYTHON` if set, else that of the environment `install` makes."""
    given = os.environ.get(PYTHON_VARIABLE)
    return Path(given) if given else install()


class Bfcl:
    """BFCL's worker for the duration of a `with` block: its requests, one at a time (tools of concurrent runs
    may call it from several threads), and the categories it loaded."""

    def __init__(self, python: Path | None = None) -> None:
        self.python = python
        self._process: subprocess.Popen[str] | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._errors: IO[str] | None = None
        self._lock = threading.Lock()
        self._loaded: dict[str, list[dict[str, Any]]] = {}

    def __enter__(self) -> Bfcl:
        python = self.python or bfcl_python()
        # BFCL makes its result and score folders where this says, when it loads: not in its installed package.
        self._scratch = tempfile.TemporaryDirectory(prefix="reinloop-bfcl-")
        self._errors = tempfile.TemporaryFile("w+")  # the worker writes to it until __exit__ closes it
        self._process = subprocess.Popen(
            [str(python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            env={**os.environ, "BFCL_PROJECT_ROOT": self._scratch.name},
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            assert self._process.stdout is not None
            self._process.stdout.close()
        if self._errors is not None:
            self._errors.close()
        if self._scratch is not None:
            self._scratch.cleanup()

    def request(self, op: str, **fields: Any) -> Any:
        """What the worker answers `op` with `fields`; `BfclError` if it failed or stopped."""
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise BfclError("the BFCL worker is not running: use Bfcl in a with block")
        with self._lock:
            process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise BfclError(f"the BFCL worker stopped: {self._stderr()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BfclError(f"BFCL's {op} failed: {reply['error']}")
        return reply["ok"]

    def load(self, category: str) -> list[dict[str, Any]]:
        """A category's entries (`worker.Worker.load`), loaded once."""
        if category not in self._loaded:
            self._loaded[category] = self.request("load", category=category)
        return self._loaded[category]

    def execute(self, run: str, entry: str, calls: list[str]) -> list[str]:
        """The results of `calls` (Python call text) in the environments of run `run` of multi-turn `entry`."""
        results: list[str] = self.request("execute", run=run, id=entry, calls=calls)
        return results

    def score_ast(self, entry: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
        """BFCL's AST checker on `calls` (`[{function: arguments}, ...]`): `valid`, and `error_type` if not."""
        result: dict[str, Any] = self.request("score_ast", id=entry, calls=calls)
        return result

    def score_multi_turn(self, run: str, entry: str, turns: list[list[list[str]]]) -> dict[str, Any]:
        """BFCL's multi-turn checker on the calls of each turn (its steps, each a list of call text), executed
        afresh under the key `run` (never one used before for `entry`: BFCL keeps the environments by key)."""
        result: dict[str, Any] = self.request("score_multi_turn", run=run, id=entry, turns=turns)
        return result

    def _stderr(self) -> str:
        if self._errors is None:
            return ""
        self._errors.seek(0)
        return self._errors.read()[-2000:]
