"""What `reinloop inspect --allow-actions` does for the page's buttons: resume a thread after a break (extra
iterations and a hint), or answer a call waiting for approval (approve, edit, reject). Each runs the code of
`reinloop resume` (`reinloop.cli.runs.continue_thread`, the agent rebuilt from the thread's saved settings)
in a background thread, one at a time per thread; the page follows it through its live updates."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.types import Interrupt

__all__ = ["ANSWER_ACTIONS", "ActionError", "Job", "Jobs", "answer_from_form"]

ANSWER_ACTIONS = ("approve", "edit", "reject")


class ActionError(Exception):
    """A request the page cannot carry out as sent (a bad number, arguments that are not a JSON object, a
    thread already running): said on the page."""


@dataclass
class Job:
    """One run started from the page, and how it went."""

    thread: str
    what: str  # "resume" or "approval"
    state: Literal["running", "done", "failed"] = "running"
    message: str = ""  # how it ended: its finish reason, "waiting for approval", or the error
    output: io.StringIO = field(default_factory=io.StringIO)  # the steps, as `reinloop resume` prints them

    @property
    def log(self) -> str:
        return self.output.getvalue()


class Jobs:
    """The runs started from the page, by thread: the latest of each, one running at a time."""

    def __init__(self, db: str | None, *, no_memory: bool = False) -> None:
        self.db, self.no_memory = db, no_memory
        self._jobs: dict[str, Job] = {}
        self._answers: dict[str, dict[str, dict[str, Any]]] = {}  # by thread, the answers given by interrupt id
        self._lock = threading.Lock()

    def get(self, thread: str) -> Job | None:
        return self._jobs.get(thread)

    def answered(self, thread: str) -> dict[str, dict[str, Any]]:
        """The answers given to `thread`'s waiting calls, by interrupt id, that wait for the others' answers."""
        return dict(self._answers.get(thread, {}))

    def resume(self, thread: str, extra_iterations: int | None, hint: str | None) -> Job:
        """Resume `thread` as ``reinloop resume THREAD --extra-iterations N --hint TEXT`` does."""
        words = [*(["--extra-iterations", str(extra_iterations)] if extra_iterations else []),
                 *(["--hint", hint] if hint else [])]  # fmt: skip
        return self._start(thread, "resume", words, {})

    def answer(self, thread: str, interrupt_id: str, answer: dict[str, Any], waiting: Collection[str]) -> Job | None:
        """Answer the approval `interrupt_id` of `thread`, one of those `waiting` (interrupt ids), as ``reinloop
        resume THREAD`` asks on the terminal: the run continues once every waiting call has its answer (a
        decision's calls run together, after all of them are reviewed); None until then."""
        if interrupt_id not in waiting:
            raise ActionError("that call is no longer waiting for approval: reload the page")
        with self._lock:
            given = self._answers.setdefault(thread, {})
            given[interrupt_id] = answer
            if not set(waiting) <= set(given):
                return None
            answers = {key: given.pop(key) for key in waiting}
        return self._start(thread, "approval", [], answers)

    def _start(self, thread: str, what: str, words: list[str], answers: dict[str, dict[str, Any]]) -> Job:
        from reinloop.cli.parser import build_parser

        with self._lock:
            running = self._jobs.get(thread)
            if running is not None and running.state == "running":
                raise ActionError(f"thread {thread!r} is already running from this page; wait for it to stop")
            argv = ["resume", thread, *(["--db", self.db] if self.db else []), *words]
            args = build_parser().parse_args([*argv, *(["--no-memory"] if self.no_memory else [])])
            job = self._jobs[thread] = Job(thread, what)
        threading.Thread(target=_run, args=(job, args, answers), name=f"reinloop-inspect-{what}", daemon=True).start()
        return job


def _run(job: Job, args: Any, answers: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console

    from reinloop.cli import CommandError
    from reinloop.cli.runs import continue_thread
    from reinloop.errors import ReinloopError

    console = Console(file=job.output, width=120, highlight=False, color_system=None)

    def answer(waiting: Interrupt) -> dict[str, Any] | None:
        # Each answer is sent once: an answer the run refuses (an edit failing the tool's schema) leaves the
        # call waiting, for the page to ask again.
        return answers.pop(str(waiting.id), None)

    try:
        final = continue_thread(args, console, answer)
    except (CommandError, ReinloopError) as exc:
        job.state, job.message = "failed", str(exc)
    except Exception as exc:  # a model server failing mid-run: said on the page, the saved steps stay
        job.state, job.message = "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    else:
        job.state, job.message = "done", final.get("finish_reason") or "waiting for approval"


def answer_from_form(form: Mapping[str, Any]) -> dict[str, Any]:
    """An approval answer (`reinloop.approvals`) from the page's form: its action, and the edit's arguments
    (a JSON object) or the rejection's reason."""
    action = str(form.get("action", ""))
    if action == "approve":
        return {"action": "approve"}
    if action == "reject":
        return {"action": "reject", "reason": str(form.get("reason", ""))}
    if action == "edit":
        try:
            args = json.loads(str(form.get("args", "")))
        except json.JSONDecodeError as exc:
            raise ActionError(f"the arguments are not JSON ({exc}); write them as one JSON object") from None
        if not isinstance(args, dict):
            raise ActionError('the arguments must be a JSON object, e.g. {"path": "notes.txt"}')
        return {"action": "edit", "args": args}
    raise ActionError(f"unknown action {action!r}: answer one of {', '.join(ANSWER_ACTIONS)}")
