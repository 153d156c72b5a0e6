"""What `reinloop inspect --allow-actions` does for the page's buttons: resume a thread after a break (extra
iterations and a hint), or answer a call waiting for approval (approve, edit, reject). Each runs as `reinloop
resume` does (`reinloop.runs.continue_run`: the agent rebuilt from the thread's saved settings) in a
background thread, one at a time per thread; the page follows it through its live updates. A thread another
process is running, or one whose model the page does not know, is refused before any job starts.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.types import Interrupt

from reinloop.runs import RunOptions, RunsError, open_runs, saved_settings
from reinloop.text import truncate

__all__ = ["ANSWER_ACTIONS", "BUSY_TEMPLATE", "NO_MODEL_TEMPLATE", "ActionError", "Job", "Jobs", "answer_from_form"]

ANSWER_ACTIONS = ("approve", "edit", "reject")
LOG_LINE_CHARS = 200  # one message of a job's log is cut to this
NO_MODEL_TEMPLATE = (
    "thread {thread!r} was not started by the reinloop command (it was run from Python), so this page does not "
    "know its model and cannot resume it. Start the page with the model to resume such threads with: reinloop "
    "inspect --allow-actions --model MODEL (e.g. openai:gpt-4o-mini), or --base-url URL for an OpenAI-compatible "
    "server (with --model NAME if it serves several)"
)
BUSY_TEMPLATE = (
    "busy, nothing was run: thread {error.thread!r} is being run by another process ({error.holder}). Try again "
    "once that run has ended"
)


class ActionError(Exception):
    """A request the page cannot carry out as sent (a bad number, arguments that are not a JSON object, a
    thread already running, here or in another process): said on the page with the HTTP `status`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Job:
    """One run started from the page, and how it went."""

    thread: str
    what: str  # "resume" or "approval"
    state: Literal["running", "done", "failed", "busy"] = "running"  # busy: another process runs the thread
    message: str = ""  # how it ended: its finish reason, "waiting for approval", or the error
    output: io.StringIO = field(default_factory=io.StringIO)  # the steps, one line each

    @property
    def log(self) -> str:
        return self.output.getvalue()


class Jobs:
    """The runs started from the page, by thread: the latest of each, one running at a time."""

    def __init__(
        self, db: str | None, *, no_memory: bool = False, model: str | None = None, base_url: str | None = None
    ) -> None:
        self.db, self.no_memory = db, no_memory
        # The model of threads that saved none (started from Python), as `reinloop resume --model/--base-url`.
        self.model, self.base_url = model, base_url
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
        return self._start(thread, "resume", {"extra_iterations": extra_iterations, "hint": hint}, {})

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
        return self._start(thread, "approval", {}, answers)

    def _start(self, thread: str, what: str, given: dict[str, Any], answers: dict[str, dict[str, Any]]) -> Job:
        self._not_running(thread)
        args = RunOptions(thread=thread, db=self.db, no_memory=self.no_memory, **given, **self._ready(thread))
        with self._lock:
            self._not_running(thread)
            job = self._jobs[thread] = Job(thread, what)
        threading.Thread(target=_run, args=(job, args, answers), name=f"reinloop-inspect-{what}", daemon=True).start()
        return job

    def _not_running(self, thread: str) -> None:
        running = self._jobs.get(thread)
        if running is not None and running.state == "running":
            raise ActionError(f"thread {thread!r} is already running from this page; wait for it to stop", 409)

    def _ready(self, thread: str) -> dict[str, Any]:
        """The settings `thread`'s resume needs beside the page's (its model, when it saved none), once no other
        process holds it; ActionError when it cannot start."""
        from reinloop.errors import ThreadBusyError
        from reinloop.lease import hold_thread

        try:
            with open_runs(self.db, must_exist=True) as db:
                settings = saved_settings(db, thread)
                with hold_thread(db.saver, thread, 0):  # taken and given back at once: who else holds it
                    pass
                if not (settings["model"] or settings["base_url"] or self.model or self.base_url):
                    raise ActionError(NO_MODEL_TEMPLATE.format(thread=thread), 409)
        except RunsError as exc:
            raise ActionError(str(exc), 404) from None
        except ThreadBusyError as exc:
            raise ActionError(BUSY_TEMPLATE.format(error=exc), 409) from None
        return {} if settings["model"] or settings["base_url"] else {"model": self.model, "base_url": self.base_url}


class _Log:
    """A job's steps, one line each, as the page shows them (`reinloop.runs.RunReport`)."""

    def __init__(self, output: io.StringIO) -> None:
        self.output = output

    def started(self, saved: Mapping[str, Any]) -> None:
        self.output.write(f"resumed at round {saved.get('iteration', 0)}\n")

    def step(self, node: str, values: dict[str, Any]) -> None:
        for message in values.get("messages") or []:
            text = " ".join(str(getattr(message, "text", "") or "").split())
            calls = ", ".join(call["name"] for call in getattr(message, "tool_calls", None) or [])
            said = truncate(text, LOG_LINE_CHARS) + (f" [calls {calls}]" if calls else "")
            self.output.write(f"{node}: {said}\n")
        if "iteration" in values and node == "check_finish":
            self.output.write(f"  round {values['iteration']} done\n")

    def refused(self, error: Exception) -> None:
        self.output.write(f"  answer not accepted: {' '.join(str(error).split())}\n")


def _run(job: Job, args: RunOptions, answers: dict[str, dict[str, Any]]) -> None:
    from reinloop.errors import ReinloopError, ThreadBusyError
    from reinloop.runs import continue_run

    def answer(waiting: Interrupt) -> dict[str, Any] | None:
        # Each answer is sent once: an answer the run refuses (an edit failing the tool's schema) leaves the
        # call waiting, for the page to ask again.
        return answers.pop(str(waiting.id), None)

    try:
        final = continue_run(args, answer, lambda built: _Log(job.output))
    except ThreadBusyError as exc:  # another process took the thread after the page looked
        job.state, job.message = "busy", BUSY_TEMPLATE.format(error=exc)
    except ReinloopError as exc:
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
