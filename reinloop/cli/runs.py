"""`reinloop run` and `reinloop resume`: stream a run, answer each approval it stops at, report how it ended
(its exit code); and what a Ctrl-C during either reports of the thread and how to continue it."""

from __future__ import annotations

import argparse
import shlex
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from reinloop.checkpoint import database_label
from reinloop.cli import EXIT_CODES, CommandError, Interrupted, display, review
from reinloop.runs import (
    LIMITS,
    Answer,
    Built,
    RunOptions,
    RunsError,
    continue_run,
    drive,
    open_agent,
    open_runs,
    run_config,
)
from reinloop.state import read_input
from reinloop.text import counted

__all__ = ["continue_thread", "options", "resume", "run"]

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
            final = drive(
                built.agent, task_input, config, answer, _Printed(console, args.quiet, built.config.max_iterations)
            )
        return _finish(final, watch, console, args.quiet)


def resume(args: argparse.Namespace, console: Console) -> int:
    watch = _Watch(args.thread, args.db)
    with _told_on_interrupt(watch):
        final = continue_thread(options(args), console, review.reviewer(console, args.thread, yes=args.yes), watch)
        return _finish(final, watch, console, args.quiet)


def continue_thread(given: RunOptions, console: Console, answer: Answer, watch: _Watch | None = None) -> dict[str, Any]:
    """Continue the thread `given.thread` as `reinloop resume` does (`reinloop.runs.continue_run`), printing its
    steps on `console`."""
    if given.thread is None:
        raise ValueError("continue_thread needs the thread to continue")
    thread = given.thread

    def printed(built: Built) -> _Printed:
        if not given.quiet:
            display.resume_header(console, thread, built.settings["model"])
        (watch or _Watch(thread, given.db)).begin(built.agent)
        return _Printed(console, given.quiet, built.config.max_iterations)

    return continue_run(given, answer, printed)


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


class _Printed:
    """A run's steps printed as they come (`reinloop.runs.RunReport`)."""

    def __init__(self, console: Console, quiet: bool, max_iterations: int) -> None:
        self.console, self.quiet, self.max_iterations = console, quiet, max_iterations
        self.printer: display.StepPrinter | None = None

    def started(self, saved: Mapping[str, Any]) -> None:
        self.printer = display.StepPrinter(self.console, self.quiet, saved, self.max_iterations)

    def step(self, node: str, values: dict[str, Any]) -> None:
        if self.printer is not None:
            self.printer.update(node, values)

    def refused(self, error: ValidationError) -> None:
        review.invalid_answer(self.console, error)


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
