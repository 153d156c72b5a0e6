"""`reinloop run` and `reinloop resume`: stream a run, answer each approval it stops at, report how it ended
(its exit code); and what a Ctrl-C during either reports of the thread and how to continue it."""

from __future__ import annotations

import argparse
import shlex
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt
from rich.console import Console

from reinloop.checkpoint import database_label
from reinloop.cli import EXIT_CODES, CommandError, Interrupted, display, review
from reinloop.runs import (
    INTERRUPTS_KEY,
    LIMITS,
    Built,
    RunOptions,
    RunsError,
    open_agent,
    open_runs,
    run_config,
    saved_settings,
)
from reinloop.state import read_input
from reinloop.text import counted

__all__ = ["Answer", "continue_thread", "options", "resume", "run"]

# What answers an approval a run stops at (`review.reviewer`); None leaves the call waiting, saved.
Answer = Callable[[Interrupt], dict[str, Any] | None]

# What Ctrl-C reports of the thread, read back from the runs database once the run has stopped.
NOTHING_SAVED_TEMPLATE = "interrupted: nothing was saved; thread {thread} has no checkpoint (run the task again)"
NOTHING_NEW_TEMPLATE = "interrupted: nothing new was saved; thread {thread} is as it was at step {step} ({rounds} done)"
SAVED_TEMPLATE = "interrupted: thread {thread} is saved up to step {step} ({rounds} done)"
CONTINUE_TEMPLATE = "; continue it with: {command}"
UNREAD_TEMPLATE = "interrupted; what thread {thread} has saved cannot be read ({error}): see 'reinloop show {thread}'"


def run(args: argparse.Namespace, console: Console) -> int:
    # Checked before a model server starts or a database opens: a blank task is a usage error.
    task_input = read_input({"task": args.task})
    thread = args.thread or f"run-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    given = options(args)
    watch = _Watch(thread, args.db)
    with (
        _told_on_interrupt(watch),
        open_runs(args.db, must_exist=False) as db,
        open_agent(given.settings(), db, limits=given.limits, no_memory=given.no_memory) as built,
    ):
        config = run_config(thread, built.settings)
        stopped = watch.begin(built.agent).next  # a damaged thread is refused here, before the lease writes
        # Held from here to the end: another process's run of the thread comes before or after this one.
        with built.agent.hold(config):
            # Read again once held: a thread that another process is running is busy, not stopped.
            if stopped and watch.begin(built.agent).next:
                raise CommandError(f"thread {thread!r} is stopped mid-step; continue it with: {watch.command}")
            if not args.quiet:
                display.run_header(console, thread, built.settings["model"], db.location)
            answer = review.reviewer(console, thread, yes=args.yes)
            final = _stream(built, task_input, config, console, args.quiet, answer)
        return _finish(final, watch, console, args.quiet)


def resume(args: argparse.Namespace, console: Console) -> int:
    watch = _Watch(args.thread, args.db)
    with _told_on_interrupt(watch):
        final = continue_thread(options(args), console, review.reviewer(console, args.thread, yes=args.yes), watch)
        return _finish(final, watch, console, args.quiet)


def continue_thread(given: RunOptions, console: Console, answer: Answer, watch: _Watch | None = None) -> dict[str, Any]:
    """Continue the thread `given.thread` as `reinloop resume` does, printing its steps on `console`, and return
    its state once it ends or waits: the agent rebuilt from the settings saved with the thread (those `given`
    overrides), a fresh budget after a circuit break (`prepare_resume`), each approval it stops at answered by
    `answer` (None leaves the call waiting, saved). `reinloop inspect --allow-actions` runs it for the page's
    resume and approval buttons."""
    from reinloop.resume import prepare_resume

    if given.thread is None:
        raise ValueError("continue_thread needs the thread to continue")
    thread = given.thread
    with open_runs(given.db, must_exist=True) as db:
        saved = saved_settings(db, thread)
        settings = {**saved, **{k: v for k, v in given.settings().items() if v is not None}}
        if given.preset and not given.protocol:
            settings["protocol"] = None  # the new preset's protocol, not the one the run was saved with
        with open_agent(settings, db, limits=given.limits, no_memory=given.no_memory) as built:
            config = run_config(thread, built.settings)
            # Held from the read of where the thread stopped to the end of the run: a second resume of it waits
            # at most thread_wait_s, then fails with ThreadBusyError, having written nothing.
            with built.agent.hold(config):
                if not given.quiet:
                    display.resume_header(console, thread, built.settings["model"])
                (watch or _Watch(thread, given.db)).begin(built.agent)
                extra = given.extra_iterations
                prepared = prepare_resume(built.agent, config, extra_iterations=extra, hint=given.hint)
                final: dict[str, Any] = _stream(built, None, prepared, console, given.quiet, answer)
                return final


def options(args: argparse.Namespace) -> RunOptions:
    """What `reinloop run` or `resume` is given on its command line."""
    return RunOptions(
        thread=getattr(args, "thread", None),
        db=args.db,
        model=args.model,
        base_url=args.base_url,
        workspace=args.workspace,
        protocol=args.protocol,
        approve=args.approve,
        preset=args.preset,
        mcp_config=args.mcp_config,
        mcp_prefix=bool(args.mcp_prefix),
        limits={key: getattr(args, key, None) for key in LIMITS},  # open_agent skips those left out (None)
        no_memory=bool(getattr(args, "no_memory", False)),
        quiet=bool(args.quiet),
        extra_iterations=getattr(args, "extra_iterations", None),
        hint=getattr(args, "hint", None),
    )


def _stream(built: Built, payload: Any, config: RunnableConfig, console: Console, quiet: bool, answer: Answer) -> Any:
    """Run until the run ends, answering each approval it stops at with `answer`; the thread's final state, or
    its state waiting at the approvals `answer` leaves unanswered (None)."""
    from langgraph.errors import is_invalid_resume
    from pydantic import ValidationError

    agent, thread = built.agent, (config.get("configurable") or {})["thread_id"]
    saved = agent.get_state({"configurable": {"thread_id": thread}}).values
    printer = display.StepPrinter(console, quiet, saved, built.config.max_iterations)
    waiting: list[Interrupt] = []
    while True:
        try:
            waiting = _until_stopped(agent, payload, config, printer)
        except ValidationError as exc:
            if not (waiting and is_invalid_resume(exc)):
                raise
            review.invalid_answer(console, exc)  # the same calls wait: ask again
        answers = {interrupt.id: answer(interrupt) for interrupt in waiting}
        if not waiting or None in answers.values():
            return agent.get_state({"configurable": {"thread_id": thread}}).values
        payload = Command(resume=answers)


def _until_stopped(agent: Any, payload: Any, config: RunnableConfig, printer: display.StepPrinter) -> list[Interrupt]:
    """Stream the run until it ends or stops at interrupts (approvals), which it returns."""
    waiting: list[Interrupt] = []
    for update in agent.stream(payload, config, stream_mode="updates"):
        for node, values in update.items():
            if node == INTERRUPTS_KEY:
                waiting.extend(values)
            else:
                printer.update(node, values or {})
    return waiting


def _finish(values: dict[str, Any], watch: _Watch, console: Console, quiet: bool) -> int:
    display.final_report(console, values, f"{watch.command} --extra-iterations 10", quiet)
    return EXIT_CODES.get(values.get("finish_reason") or "", 1)


# Ctrl-C ------------------------------------------------------------------------------------------------


class _Watch:
    """What a Ctrl-C during `run` or `resume` reports: the thread, the command that continues it (with --db
    when one was given: REINLOOP_DB and the default need none), and its latest checkpoint when this command
    began to run it (`begin`; the report tells whether anything new was saved since)."""

    def __init__(self, thread: str, db: str | None) -> None:
        self.thread, self.db = thread, db
        words = ["reinloop", "resume", thread, *(["--db", database_label(db)] if db else [])]
        self.command = shlex.join(words)
        self.began = False
        self.before: str | None = None

    def begin(self, agent: Any) -> Any:
        """Note where the thread stands as the run begins; its state snapshot."""
        snapshot = agent.get_state({"configurable": {"thread_id": self.thread}})
        self.began, self.before = True, _checkpoint_id(snapshot)
        return snapshot

    def report(self) -> str:
        """What the thread has saved, read back once the run stopped, and how to continue it."""
        from reinloop.graph import agent_topology

        try:
            with open_runs(self.db, must_exist=True) as db:
                snapshot = agent_topology(db.saver).get_state({"configurable": {"thread_id": self.thread}})
        except RunsError:  # no runs database: the run stopped before it made one
            return NOTHING_SAVED_TEMPLATE.format(thread=self.thread)
        except Exception as exc:  # a database gone or damaged: say so, and where to look
            return UNREAD_TEMPLATE.format(thread=self.thread, error=" ".join(str(exc).split()) or type(exc).__name__)
        if snapshot.metadata is None:
            return NOTHING_SAVED_TEMPLATE.format(thread=self.thread)
        new = self.began and _checkpoint_id(snapshot) != self.before
        step, rounds = snapshot.metadata.get("step"), counted(snapshot.values.get("iteration", 0), "round")
        text = (SAVED_TEMPLATE if new else NOTHING_NEW_TEMPLATE).format(thread=self.thread, step=step, rounds=rounds)
        reason = snapshot.values.get("finish_reason")
        resumable = bool(snapshot.next) or reason not in (None, "answered")
        return text + (CONTINUE_TEMPLATE.format(command=self.command) if resumable else "")


def _checkpoint_id(snapshot: Any) -> str | None:
    """The id of a state snapshot's checkpoint; None for a thread with none."""
    return None if snapshot.metadata is None else str(snapshot.config["configurable"]["checkpoint_id"])


@contextmanager
def _told_on_interrupt(watch: _Watch) -> Iterator[None]:
    """Ctrl-C: once the block has stopped what it started (the model server, the database), end the tool
    workers and report what was saved (`Interrupted`)."""
    from reinloop.tools.execution import stop_workers

    try:
        yield
    except KeyboardInterrupt:
        # Before the report, not at interpreter exit: a worker still running a call has nothing to wait for.
        stop_workers()
        raise Interrupted(watch.report()) from None
