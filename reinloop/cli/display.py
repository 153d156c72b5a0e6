"""What `reinloop` prints: progress while a model starts, the live step lines of a run, its final report, and
the saved state and history of a thread.

Text from models, tools and users (answers, observations, arguments, thread ids, paths) is always passed to
rich as `Text`, never as a markup string: a final answer containing ``[/]`` would otherwise fail to print,
and ``'reinloop[eval]'`` would lose its ``[eval]``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import StateSnapshot
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reinloop.graph import CHECK_FINISH, VALIDATE_ARGS
from reinloop.guards.tool_circuit import circuit_text
from reinloop.nodes.circuit_break import EXPLANATION_KEY
from reinloop.text import counted

if TYPE_CHECKING:
    from reinloop.pruning import PruneReport
    from reinloop_eval.benchmark import Benchmark
    from reinloop_eval.grid import Grid

__all__ = [
    "SHOWN_CHARS",
    "StepPrinter",
    "benchmark_report",
    "final_report",
    "history_table",
    "marked",
    "progress",
    "prune_report",
    "resume_header",
    "run_header",
    "state_json",
    "thread_state",
    "tool_table",
    "unmarked",
    "wrote",
]

SHOWN_CHARS = 160
HISTORY_COLUMNS = ("step", "source", "next", "round", "errors", "tokens", "finish", "saved at", "checkpoint", "mark")
# The logger whose INFO records are progress to show (the embedded model starting, `reinloop.models.local`).
PROGRESS_LOGGER = "reinloop"


# progress ---------------------------------------------------------------------------------------------


class _Progress(logging.Handler):
    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(Text(record.getMessage(), "dim"), soft_wrap=True)


@contextmanager
def progress(console: Console, *, shown: bool = True) -> Iterator[None]:
    """While the block runs, reinloop's progress messages (its INFO log records) are printed on `console`."""
    if not shown:
        yield
        return
    logger, handler = logging.getLogger(PROGRESS_LOGGER), _Progress(console)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(level or logging.INFO, logging.INFO))
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# a run as it streams ----------------------------------------------------------------------------------


def run_header(console: Console, thread: str, model: str, location: str) -> None:
    console.print(Text.assemble(("thread", "dim"), " ", (thread, "bold"), "  ", ("model", "dim"), f" {model}  ",
                                ("db", "dim"), f" {location}"))  # fmt: skip


def resume_header(console: Console, thread: str, model: str) -> None:
    console.print(Text.assemble(("resuming thread", "dim"), " ", (thread, "bold"), "  ", ("model", "dim"), f" {model}"))


class StepPrinter:
    """One line per step as the graph streams: node, tool, arguments, observation, counters, which start from
    the thread's saved `state` (a resumed run goes on counting) and its agent's `max_iterations`."""

    COUNTERS = ("consecutive_errors", "iterations_left", "usage")

    def __init__(self, console: Console, quiet: bool, state: Mapping[str, Any], max_iterations: int) -> None:
        self.console, self.quiet, self.max_iterations = console, quiet, max_iterations
        self.counters: dict[str, Any] = {}  # the latest value of each counter, for the round line
        self._count(state)

    def update(self, node: str, values: dict[str, Any]) -> None:
        if node == CHECK_FINISH and "iterations_left" not in values:
            # check_finish leaves the budget as it was on the answering round, which counts all the same.
            values = {**values, "iterations_left": self.counters["iterations_left"] - 1}
        self._count(values)
        if self.quiet:
            return
        for message in values.get("messages", []) or []:
            self._message(node, message)
        if node == CHECK_FINISH:
            errors, left = self.counters.get("consecutive_errors", 0), self.counters.get("iterations_left", "-")
            tokens = (self.counters.get("usage") or {}).get("total_tokens", 0)
            line = f"  round {values.get('iteration')}  ·  errors in a row {errors}  ·  rounds left {left}"
            self.console.print(Text(f"{line}  ·  tokens {tokens}", "dim"))
        if node == VALIDATE_ARGS and values.get("correction"):
            self.console.print(Text("  ↻ unreadable reply: asking again with a correction hint", "yellow"))

    def _count(self, values: Mapping[str, Any]) -> None:
        self.counters.update({key: values[key] for key in self.COUNTERS if key in values})
        if self.counters.get("iterations_left") is None:  # a fresh budget (a new thread, or a new task on one)
            self.counters["iterations_left"] = self.max_iterations

    def _message(self, node: str, message: BaseMessage) -> None:
        label = (node, "cyan")
        if isinstance(message, AIMessage) and message.tool_calls:
            if message.text:
                self.console.print(Text.assemble(label, " ", (_short(message.text), "italic")))
            for call in message.tool_calls:
                args = json.dumps(call["args"], ensure_ascii=False)
                self.console.print(Text.assemble(label, " → ", (call["name"], "bold"), f"({_short(args)})"))
        elif isinstance(message, ToolMessage):
            mark = ("✗", "red") if message.status == "error" else ("✓", "green")
            self.console.print(Text.assemble(label, " ", mark, f" {message.name}: {_short(message.text)}"))
        elif getattr(message, "type", "") == "remove":
            return
        else:
            self.console.print(Text.assemble(label, f" {_short(_explained(message))}"))


def final_report(console: Console, values: dict[str, Any], resume_command: str, quiet: bool) -> None:
    """The final answer, or why the run stopped and the command that continues it (`resume_command`); with
    counters unless `quiet`."""
    reason = values.get("finish_reason")
    if quiet:
        if values.get("final_answer") is not None:
            console.print(Text(values["final_answer"]), soft_wrap=True)
        return
    console.rule(Text(str(reason), "green" if reason == "answered" else "yellow"))
    if reason == "answered":
        console.print(Text(values.get("final_answer") or ""), soft_wrap=True)
    else:
        for message in values.get("messages", [])[-1:]:
            console.print(Text(_explained(message)), soft_wrap=True)
        console.print(Text.assemble(("continue with:", "dim"), f" {resume_command}"))
    usage = values.get("usage") or {}
    counts = [(values.get("iteration", 0), "round"), (usage.get("model_calls", 0), "model call"),
              (usage.get("total_tokens", 0), "token")]  # fmt: skip
    console.print(Text(", ".join(counted(count, noun) for count, noun in counts) + _cached(usage), "dim"))


def _cached(usage: Mapping[str, Any]) -> str:
    """The prompt tokens the provider's cache served and those written to it, when it reported any."""
    read, written = usage.get("cache_read_tokens") or 0, usage.get("cache_write_tokens") or 0
    if not read and not written:
        return ""
    return f" (of the prompt tokens: {read} read from the provider's cache, {written} written to it)"


def _explained(message: BaseMessage) -> str:
    """A message's text; for a circuit break's final message, its explanation without the library's advice,
    which names the Python call (the command that continues the run is printed after it)."""
    return str(message.response_metadata.get(EXPLANATION_KEY, message.text))


# a saved thread ---------------------------------------------------------------------------------------


def history_table(
    console: Console, thread: str, snapshots: Sequence[StateSnapshot], labels: Mapping[str, str] | None = None
) -> None:
    """The thread's checkpoints, oldest first, with the labels of those marked to keep (by checkpoint id)."""
    labels = labels or {}
    table = Table(title=Text(f"thread {thread}: {len(snapshots)} checkpoints"))
    for column in HISTORY_COLUMNS:
        table.add_column(column)
    for snapshot in reversed(snapshots):
        values, metadata = snapshot.values, snapshot.metadata or {}
        cells = (
            metadata.get("step", ""),
            metadata.get("source", ""),
            ", ".join(snapshot.next),
            values.get("iteration", ""),
            values.get("consecutive_errors", ""),
            (values.get("usage") or {}).get("total_tokens", ""),
            values.get("finish_reason") or "",
            (snapshot.created_at or "")[:19].replace("T", " "),
            snapshot.config["configurable"]["checkpoint_id"][-8:],
            labels.get(snapshot.config["configurable"]["checkpoint_id"], ""),
        )
        table.add_row(*(Text(str(cell)) for cell in cells))
    console.print(table)


def thread_state(console: Console, thread: str, snapshot: StateSnapshot) -> None:
    """The thread's saved state: task, outcome, counters, calls in doubt, tools' circuits, summaries and the
    window."""
    values = snapshot.values
    console.rule(Text(f"thread {thread}"))
    for key in ("task", "finish_reason", "final_answer", "iteration", "consecutive_errors", "usage"):
        console.print(Text.assemble((key, "bold"), f": {values.get(key)}"), soft_wrap=True)
    if snapshot.next:
        stopped = f": {', '.join(snapshot.next)} (resume continues from there)"
        console.print(Text.assemble(("stopped before", "bold"), stopped))
    for call in values.get("in_doubt") or []:
        args = json.dumps(call["args"], ensure_ascii=False)
        detail = (
            f": {call['name']}({_short(args)}) was in flight when the run stopped and was not run again "
            f"(the tool is not idempotent); key {call['key']}"
        )
        console.print(Text.assemble(("outcome unknown", "bold red"), detail), soft_wrap=True)
    for name, circuit in (values.get("circuits") or {}).items():
        console.print(Text.assemble(("circuit", "bold"), f" {name}: {circuit_text(circuit)}"), soft_wrap=True)
    for summary in values.get("summaries") or []:
        console.print(Text.assemble(("summary", "bold"), f": {_short(summary)}"))
    console.print(Text.assemble(("window", "bold"), ":"))
    for message in values.get("messages", []):
        label = message.name or message.type
        calls = getattr(message, "tool_calls", None)
        text = message.text or (json.dumps([[c["name"], c["args"]] for c in calls]) if calls else "")
        console.print(Text.assemble("  ", (label, "cyan"), f" {_short(text)}"), soft_wrap=True)


def state_json(console: Console, values: dict[str, Any]) -> None:
    console.print_json(json.dumps(_plain(values), default=str))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return {"type": value.type, "name": value.name, "content": value.content,
                "tool_calls": getattr(value, "tool_calls", None)}  # fmt: skip
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


# the tools ---------------------------------------------------------------------------------------------


def tool_table(console: Console, rows: Sequence[tuple[str, str]]) -> None:
    """The tools a run gets: each one's call shape and where it comes from (built-in, or an MCP server)."""
    table = Table(title=Text(counted(len(rows), "tool")))
    table.add_column("tool")
    table.add_column("source")
    for signature, source in rows:
        table.add_row(Text(signature), Text(source))
    console.print(table)


# a bounded database ----------------------------------------------------------------------------------


def prune_report(console: Console, report: PruneReport, location: str) -> None:
    """What `reinloop prune` deleted, or would delete with --dry-run, and the database's size."""
    verb = "would delete" if report.dry_run else "deleted"
    counts = f"{counted(report.checkpoints, 'checkpoint')}, {counted(report.writes, 'pending write')} and "
    counts += f"{counted(report.blobs, 'stored value')} of {counted(report.threads, 'thread')}"
    console.print(Text(f"{verb} {counts}; {counted(report.kept, 'checkpoint')} kept"))
    console.print(Text(f"{location}: {_size(report.bytes_before)} before, {_size(report.bytes_after)} after", "dim"))
    if report.dry_run:
        console.print(Text("dry run: nothing was deleted", "dim"))
    elif report.checkpoints and report.bytes_after >= report.bytes_before:
        console.print(Text("the freed space is reused by later runs; --vacuum shrinks a SQLite file", "dim"))


def marked(console: Console, thread: str, checkpoint: str, label: str) -> None:
    labelled = f" ({label})" if label else ""
    console.print(Text(f"marked checkpoint {checkpoint} of thread {thread}{labelled}: prune keeps it"))


def unmarked(console: Console, thread: str, checkpoint: str, removed: bool) -> None:
    if removed:
        console.print(Text(f"unmarked checkpoint {checkpoint} of thread {thread}: prune may delete it"))
    else:
        console.print(Text(f"checkpoint {checkpoint} of thread {thread} was not marked"))


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 100_000 else f"{count / 1e3:.1f} kB"


# files ------------------------------------------------------------------------------------------------


def wrote(console: Console, path: Path) -> None:
    console.print(Text(f"wrote {path}"))


def benchmark_report(console: Console, result: Benchmark | Grid) -> None:
    """The summary table of `reinloop eval` (or of its fault grid) and the files it wrote."""
    console.print(Text(result.table))
    console.print(Text(f"report: {', '.join(str(path) for path in result.files)}"))
    if not result.chart:
        console.print(Text(f"no chart: pip install 'reinloop[eval]' for {result.CHART}", "dim"))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
