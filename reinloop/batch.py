"""Many runs of one agent: one run per task of a batch, each on a thread named after its task, with its result
appended to a JSONL file as it ends (`run_many`, `reinloop batch TASKS.jsonl`).

A batch is safe to run again with the same arguments, however it stopped: tasks with a result in the file are
skipped, a task whose thread was saved mid-run continues from its last checkpoint (so no saved tool call runs
again), and a task whose thread finished but whose result was not written yet (the driver died between the two)
is read back without running. A task that keeps failing ends with its error in the file (finish_reason
"error"), never lost. Runs go one event loop in this process (`concurrency` at once, on an `AsyncSqliteSaver` or
`AsyncPostgresSaver`), or over a Ray cluster (`reinloop.batch_ray`), the same scheduler driving both: at most
`concurrency` runs in flight, and no new run started once the batch's tokens or cost reach its budget.

The agent comes from a factory, ``factory(checkpointer, rate_limiter) -> compiled agent``, called once per
process: in-process it may be any callable; on Ray it is named by a ``module:function`` path, imported on each
worker, or is a `RunAgent` (plain settings), so no live object crosses processes. `rate_limiter` is a LangChain
`InMemoryRateLimiter` (this process's share of `requests_per_second`), or None: the factory gives it to its chat
model (``rate_limiter=``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import importlib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reinloop.checkpoint import aopen_checkpointer
from reinloop.errors import ReinloopError

__all__ = [
    "ERROR",
    "NOT_STARTED",
    "AgentFactory",
    "BatchError",
    "BatchLimits",
    "BatchSummary",
    "BatchTask",
    "Prices",
    "ResultsFile",
    "RunAgent",
    "arun_many",
    "arun_task",
    "check_limits",
    "load_factory",
    "read_tasks",
    "result_record",
    "run_many",
    "thread_for",
]

# The finish reason of a task whose every attempt raised: its result holds the last error.
ERROR = "error"
# What the summary calls tasks never started because the batch's budget was spent.
NOT_STARTED = "not started (budget spent)"
THREAD_PREFIX = "batch:"
# What a result reports of its run's `usage`.
USAGE_KEYS = ("model_calls", "prompt_tokens", "completion_tokens", "total_tokens")


class BatchError(ReinloopError):
    """A batch cannot start as given (a bad tasks file, a factory that cannot be found, a bad limit): nothing ran."""


class AgentFactory(Protocol):
    def __call__(self, checkpointer: Any, rate_limiter: Any | None) -> Any: ...


@dataclass(frozen=True, slots=True)
class BatchTask:
    """One task of a batch: `id` names its thread and its result; `task` is what the agent is asked."""

    id: str
    task: str


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per million prompt and completion tokens: what a result's `cost_usd` is counted in."""

    prompt_per_million: float
    completion_per_million: float

    def cost(self, usage: Mapping[str, int]) -> float:
        return (
            usage.get("prompt_tokens", 0) * self.prompt_per_million
            + usage.get("completion_tokens", 0) * self.completion_per_million
        ) / 1e6


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """How much of a batch runs at once and in all.

    concurrency: runs in flight at once, in all (on Ray, spread over the workers).
    attempts: tries of a task that raises (a model server down, a busy thread) before its error is its result.
    max_tokens / max_cost_usd: the batch's budget: once its results' tokens (or cost, with `Prices`) reach it,
    those written by earlier runs of the batch included, no new run starts; the runs in flight end, the rest stay
    unstarted for a later run of the batch with a larger budget.
    requests_per_second: the model calls a second, in all; each process's factory gets its share as a
        rate limiter.
    """

    concurrency: int = 8
    attempts: int = 3
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    requests_per_second: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.attempts < 1:
            raise BatchError("concurrency and attempts must be at least 1")
        for name in ("max_tokens", "max_cost_usd", "requests_per_second"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise BatchError(f"{name} must be above 0 (got {value})")


@dataclass
class BatchSummary:
    """What a batch did: its tasks, those skipped as already answered, the finish reasons of the runs it ran,
    the tokens and cost of those runs (and of the results written before), the tasks left unstarted by the
    budget, and its wall and CPU time."""

    tasks: int
    skipped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    cost_usd: float = 0.0
    not_started: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    # What the results already in the file had spent (the budget counts them too).
    earlier_tokens: int = 0
    earlier_cost_usd: float = 0.0

    @property
    def ran(self) -> int:
        return sum(self.reasons.values())

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reasons": dict(self.reasons), "ran": self.ran}


def thread_for(task_id: str, prefix: str = THREAD_PREFIX) -> str:
    return f"{prefix}{task_id}"


# -- the tasks file and the results file ----------------------------------------------------------------------


def read_tasks(path: str | Path) -> list[BatchTask]:
    """The tasks of a JSONL file: one object a line with a non-blank "task" and an optional "id" (a string or an
    integer; default: the line's number). Blank lines are skipped; a bad line or a repeated id is a
    `BatchError` naming the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"cannot read the tasks file {path}: {exc}") from exc
    tasks: list[BatchTask] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        task = _task(line, number, f"{path}:{number}")
        if task.id in seen:
            raise BatchError(f"{path}:{number}: id {task.id!r} is already the id of line {seen[task.id]}")
        seen[task.id] = number
        tasks.append(task)
    return tasks


def _task(line: str, number: int, where: str) -> BatchTask:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BatchError(f'{where}: not JSON ({exc.msg}); write one object a line, e.g. {{"task": "..."}}') from exc
    if not isinstance(item, dict):
        raise BatchError(f'{where}: a line must be a JSON object with a "task", not {type(item).__name__}')
    task, task_id = item.get("task"), item.get("id", number)
    if not isinstance(task, str) or not task.strip():
        raise BatchError(f'{where}: "task" must be a non-blank string')
    if isinstance(task_id, bool) or not isinstance(task_id, str | int) or not str(task_id).strip():
        raise BatchError(f'{where}: "id" must be a non-blank string or an integer')
    return BatchTask(id=str(task_id), task=task)


class ResultsFile:
    """The results of a batch, one JSON object a line, appended as each run ends and flushed to disk, so a batch
    stopped at any moment keeps every result it wrote. A last line cut short by a crash is ignored (and ended,
    so the next result starts on a line of its own)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, dict[str, Any]]:
        """The results written so far, by task id (the last one of an id, if a task was answered twice)."""
        if not self.path.exists():
            return {}
        results: dict[str, dict[str, Any]] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("id"), str):
                    results[record["id"]] = record
        return results

    def append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+b") as file:  # appends whatever the position; reads where it seeks
            line = json.dumps(record, ensure_ascii=False).encode() + b"\n"
            if file.seek(0, os.SEEK_END):
                file.seek(-1, os.SEEK_END)
                if file.read(1) != b"\n":  # a record cut short by a crash: the new one starts its own line
                    line = b"\n" + line
            file.write(line)
            file.flush()
            os.fsync(file.fileno())


# -- one task ----------------------------------------------------------------------------------------------


async def arun_task(
    agent: Any, task: BatchTask, *, attempts: int = 3, prefix: str = THREAD_PREFIX, prices: Prices | None = None
) -> dict[str, Any]:
    """Run one task to its end on its thread and return its result; never raises for the run's own failure.

    The thread decides what runs: nothing saved starts the task; a run saved mid-way (a dead worker's) continues
    from its checkpoint; a finished run of this task is read back as it is. An attempt that raises is tried
    again, after a pause, up to `attempts` tries; then the result is the error, finish_reason "error"."""
    thread = thread_for(task.id, prefix)
    config = {"configurable": {"thread_id": thread}}
    started, tried, error = time.perf_counter(), 0, ""
    while tried < attempts:
        tried += 1
        try:
            values = await _run_or_read(agent, task, config)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the run's own failure: a model server down, a busy thread, a bug
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:2000]
            if tried < attempts:
                await asyncio.sleep(min(2.0 ** (tried - 1), 10.0))
            continue
        return result_record(task, thread, values, tried, time.perf_counter() - started, prices)
    return result_record(task, thread, None, tried, time.perf_counter() - started, prices, error=error)


async def _run_or_read(agent: Any, task: BatchTask, config: Any) -> dict[str, Any]:
    saved = await agent.aget_state(config)
    if saved.values.get("task") != task.task:
        return dict(await agent.ainvoke({"task": task.task}, config))
    if saved.interrupts:  # waiting for an approval no batch can give
        return dict(saved.values)
    # Every end has its typed reason. (An empty `next` alone is no end: LangGraph shows a step whose tasks all
    # saved their writes before the process died with those writes applied and nothing next.)
    if saved.values.get("finish_reason") and not saved.next:
        return dict(saved.values)
    return dict(await agent.ainvoke(None, config))  # saved mid-run: go on from the last checkpoint


def result_record(
    task: BatchTask,
    thread: str,
    values: Mapping[str, Any] | None,
    attempts: int,
    seconds: float,
    prices: Prices | None,
    *,
    error: str | None = None,
) -> dict[str, Any]:
    values = values or {}
    usage = dict(values.get("usage") or {})
    reason = ERROR if error else values.get("finish_reason") or "waiting_for_approval"
    return {
        "id": task.id,
        "thread_id": thread,
        "answer": values.get("final_answer"),
        "finish_reason": reason,
        "iterations": values.get("iteration", 0),
        "usage": {key: usage.get(key, 0) for key in USAGE_KEYS},
        "cost_usd": None if prices is None else round(prices.cost(usage), 8),
        "error": error,
        "attempts": attempts,
        "seconds": round(seconds, 3),
        "worker": f"pid {os.getpid()}",
    }


# -- the scheduler ----------------------------------------------------------------------------------------------


Submit = Callable[[BatchTask], Awaitable[dict[str, Any]]]


async def schedule(
    tasks: Sequence[BatchTask],
    submit: Submit,
    results: ResultsFile,
    limits: BatchLimits,
    *,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> BatchSummary:
    """Run the tasks without a result in `results` (or whose result is an error), at most `limits.concurrency`
    at once, appending each result as it comes; stop starting runs once the budget is spent. `submit` runs one
    task (here or on a worker)."""
    started, cpu = time.perf_counter(), time.process_time()
    written = results.read()
    done = {task_id for task_id, record in written.items() if record["finish_reason"] != ERROR}
    summary = BatchSummary(tasks=len(tasks), skipped=sum(task.id in done for task in tasks))
    # The budget is the batch's: what its earlier runs spent counts.
    summary.earlier_tokens = sum(_tokens(record) for record in written.values())
    summary.earlier_cost_usd = sum(record.get("cost_usd") or 0.0 for record in written.values())
    spent = _spent(summary, limits)
    waiting = iter([task for task in tasks if task.id not in done])
    running: set[asyncio.Task[dict[str, Any]]] = set()
    while True:
        while not spent and len(running) < limits.concurrency and (task := next(waiting, None)) is not None:
            running.add(asyncio.ensure_future(submit(task)))
        if not running:
            break
        finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for future in finished:
            record = future.result()
            results.append(record)
            _count(summary, record)
            if on_result is not None:
                on_result(record)
        spent = spent or _spent(summary, limits)
    summary.not_started = sum(1 for _ in waiting)
    summary.seconds, summary.cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    return summary


def _count(summary: BatchSummary, record: Mapping[str, Any]) -> None:
    summary.reasons[record["finish_reason"]] += 1
    summary.tokens += record["usage"]["total_tokens"]
    summary.cost_usd += record["cost_usd"] or 0.0


def _spent(summary: BatchSummary, limits: BatchLimits) -> bool:
    tokens, cost = summary.tokens + summary.earlier_tokens, summary.cost_usd + summary.earlier_cost_usd
    return (limits.max_tokens is not None and tokens >= limits.max_tokens) or (
        limits.max_cost_usd is not None and cost >= limits.max_cost_usd
    )


def _tokens(record: Mapping[str, Any]) -> int:
    usage = record.get("usage")
    return int(usage.get("total_tokens", 0)) if isinstance(usage, dict) else 0


# -- in this process -------------------------------------------------------------------------------------------


def rate_limiter(requests_per_second: float | None, processes: int = 1) -> Any | None:
    """This process's share of a batch's rate limit, as LangChain's `InMemoryRateLimiter`; None without one."""
    if requests_per_second is None:
        return None
    from langchain_core.rate_limiters import InMemoryRateLimiter

    share = requests_per_second / processes
    return InMemoryRateLimiter(requests_per_second=share, check_every_n_seconds=min(0.1, 1 / share), max_bucket_size=1)


@dataclass(frozen=True)
class RunAgent:
    """The factory of `reinloop run`'s agent: the model the settings name (the embedded model without one and
    without OPENAI_API_KEY), the preset, the toolset in `workspace`, the approvals (a run that reaches one waits,
    saved, for `reinloop resume`; none with `yes`). Plain settings, so it can be sent to Ray workers; the model
    it starts runs until the process ends."""

    model: str | None = None
    base_url: str | None = None
    protocol: str | None = None
    preset: str | None = None
    workspace: str = "reinloop-workspace"
    approve: str | None = None
    mcp_config: str | None = None
    mcp_prefix: bool = False
    limits: tuple[tuple[str, Any], ...] = ()
    yes: bool = False  # approve every call: no run stops for an approval

    def __call__(self, checkpointer: Any, rate_limiter: Any | None) -> Any:
        from reinloop.runs import build_run_agent

        stack = contextlib.ExitStack()
        atexit.register(stack.close)
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("limits", "yes")}
        built = build_run_agent(stack, settings, lambda: checkpointer, limits=dict(self.limits),
                                rate_limiter=rate_limiter, ask=not self.yes)  # fmt: skip
        return built.agent


def load_factory(path: str | AgentFactory) -> AgentFactory:
    """A factory given as itself, or as ``module:function``, imported here with the working folder on the path
    (as uvicorn and gunicorn import an app), so a module beside the tasks file is found."""
    if callable(path):
        return path
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module, _, name = str(path).partition(":")
    if not module or not name:
        raise BatchError(f"the agent factory must be given as module:function, not {path!r}")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise BatchError(f"cannot load the agent factory {path!r}: {exc}") from exc
    if not callable(found):
        raise BatchError(f"the agent factory {path!r} is not callable")
    return found  # type: ignore[no-any-return]


async def arun_many(
    factory: str | AgentFactory,
    tasks: Iterable[BatchTask] | str | Path,
    *,
    db: str | Path,
    results: str | Path,
    limits: BatchLimits | None = None,
    prices: Prices | None = None,
    prefix: str = THREAD_PREFIX,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> BatchSummary:
    """`run_many` in a running event loop."""
    limits = limits or BatchLimits()
    check_limits(limits, prices)
    batch = read_tasks(tasks) if isinstance(tasks, str | Path) else list(tasks)
    make = load_factory(factory)
    async with aopen_checkpointer(db) as saver:
        agent = make(saver, rate_limiter(limits.requests_per_second))

        def submit(task: BatchTask) -> Awaitable[dict[str, Any]]:
            return arun_task(agent, task, attempts=limits.attempts, prefix=prefix, prices=prices)

        return await schedule(batch, submit, ResultsFile(results), limits, on_result=on_result)


def run_many(
    factory: str | AgentFactory,
    tasks: Iterable[BatchTask] | str | Path,
    *,
    db: str | Path,
    results: str | Path,
    limits: BatchLimits | None = None,
    prices: Prices | None = None,
    prefix: str = THREAD_PREFIX,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> BatchSummary:
    """Run one agent over many tasks in this process, `limits.concurrency` runs at once in one event loop, each
    saved on `db` (a SQLite path or a PostgreSQL URL) under the thread ``batch:<task id>``, each result appended
    to the JSONL file `results` as it ends. Run it again with the same arguments to finish a stopped batch."""
    many = arun_many(factory, tasks, db=db, results=results, limits=limits, prices=prices, prefix=prefix,
                     on_result=on_result)  # fmt: skip
    return asyncio.run(many)


def check_limits(limits: BatchLimits, prices: Prices | None) -> None:
    if limits.max_cost_usd is not None and prices is None:
        raise BatchError("a budget in dollars needs the model's prices (Prices / --prices)")
    if prices is not None and not all(math.isfinite(p) and p >= 0 for p in dataclasses.astuple(prices)):
        raise BatchError("prices must be finite and not below 0")
