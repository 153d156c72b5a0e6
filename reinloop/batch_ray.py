"""A batch's runs on a Ray cluster (`run_many_on_ray`, `reinloop batch --ray`): each run a Ray actor task.

Each worker is an async Ray actor: a process that imports the agent factory by its ``module:function`` path,
builds the agent once on an `AsyncPostgresSaver` of the batch's database (every worker, on any machine, saves to
the same one), and runs up to `per_worker` runs at once in its event loop. The driver schedules with
`reinloop.batch.schedule`, as in-process batches do, and writes every result itself, so the results file has
one writer. A worker that dies (killed, out of memory, its machine gone) is restarted by Ray, and the runs it
had in flight are retried (at-least-once actor tasks): each continues from its thread's last checkpoint, and the
thread's lease (a PostgreSQL advisory lock, released when the dead worker's database sessions close) keeps two
workers off one thread, so no saved tool call runs again.

Needs the `ray` extra (``pip install 'reinloop[ray]'``) and a PostgreSQL database (the `postgres` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from reinloop.batch import (
    THREAD_PREFIX,
    BatchError,
    BatchLimits,
    BatchSummary,
    BatchTask,
    Prices,
    ResultsFile,
    RunAgent,
    arun_task,
    check_limits,
    load_factory,
    rate_limiter,
    read_tasks,
    result_record,
    schedule,
    thread_for,
)
from reinloop.checkpoint import aopen_checkpointer, is_postgres_url

__all__ = ["BatchWorker", "run_many_on_ray"]


class BatchWorker:
    """What each Ray worker process holds: its agent, built on first use from the factory path."""

    def __init__(
        self, factory: str | RunAgent, db: str, limits: BatchLimits, workers: int, prices: Prices | None, prefix: str
    ) -> None:
        self.factory, self.db, self.limits, self.workers = factory, db, limits, workers
        self.prices, self.prefix = prices, prefix
        self.agent: Any = None
        self.stack = contextlib.AsyncExitStack()
        self.ready: asyncio.Lock | None = None

    async def run(self, task: BatchTask) -> dict[str, Any]:
        agent = await self._agent()
        return await arun_task(agent, task, attempts=self.limits.attempts, prefix=self.prefix, prices=self.prices)

    async def _agent(self) -> Any:
        if self.ready is None:
            self.ready = asyncio.Lock()
        async with self.ready:
            if self.agent is None:
                saver = await self.stack.enter_async_context(aopen_checkpointer(self.db))
                limiter = rate_limiter(self.limits.requests_per_second, self.workers)
                self.agent = load_factory(self.factory)(saver, limiter)
        return self.agent

    def pid(self) -> int:
        import os

        return os.getpid()


def run_many_on_ray(
    factory: str | RunAgent,
    tasks: Iterable[BatchTask] | str | Path,
    *,
    db: str,
    results: str | Path,
    limits: BatchLimits | None = None,
    workers: int = 2,
    per_worker: int = 16,
    address: str | None = None,
    prices: Prices | None = None,
    prefix: str = THREAD_PREFIX,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_workers: Callable[[list[Any]], None] | None = None,
) -> BatchSummary:
    """Run one agent over many tasks on Ray: `workers` worker processes (actors), each running up to `per_worker`
    runs at once, at most `limits.concurrency` in all, saved on the PostgreSQL database `db`. `address` joins a
    running cluster (``ray start --head`` / ``auto``); without it a local cluster starts in this process and ends
    with the batch. `factory` is a ``module:function`` path every worker can import, or a `RunAgent`.
    `on_workers` is given the worker handles once they exist (a test kills one)."""
    limits = limits or BatchLimits()
    check_limits(limits, prices)
    if not is_postgres_url(db):
        raise BatchError(
            "a batch on Ray saves its runs where every worker reaches them: give a PostgreSQL URL "
            "(--db postgresql://...), not a SQLite file"
        )
    if not isinstance(factory, str | RunAgent):
        raise BatchError(
            "on Ray the agent factory is named by a module:function path, imported on every worker (or is a "
            "RunAgent, plain settings): a live object is not sent to other processes"
        )
    if workers < 1 or per_worker < 1:
        raise BatchError("workers and per_worker must be at least 1")
    load_factory(factory)  # a bad path is refused here, before a cluster starts
    batch = read_tasks(tasks) if isinstance(tasks, str | Path) else list(tasks)
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        _start(ray, address, workers)
    try:
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, max_concurrency=per_worker)(BatchWorker)
        options: dict[str, Any] = {"num_cpus": 0 if address is None else 1, "scheduling_strategy": "SPREAD"}
        given = (factory, db, limits, workers, prices, prefix)
        handles = [actor.options(**options).remote(*given) for _ in range(workers)]
        if on_workers is not None:
            on_workers(handles)
        return asyncio.run(_drive(ray, handles, batch, results, limits, prefix, on_result))
    finally:
        if started_here:
            ray.shutdown()


async def _drive(
    ray: Any,
    handles: list[Any],
    batch: list[BatchTask],
    results: str | Path,
    limits: BatchLimits,
    prefix: str,
    on_result: Callable[[dict[str, Any]], None] | None,
) -> BatchSummary:
    load = dict.fromkeys(range(len(handles)), 0)

    async def submit(task: BatchTask) -> dict[str, Any]:
        chosen = min(load, key=load.__getitem__)  # the worker with the fewest runs in flight
        load[chosen] += 1
        try:
            return await _remote(ray, handles[chosen].run.remote(task), task, prefix)
        finally:
            load[chosen] -= 1

    return await schedule(batch, submit, ResultsFile(results), limits, on_result=on_result)


async def _remote(ray: Any, ref: Awaitable[dict[str, Any]], task: BatchTask, prefix: str) -> dict[str, Any]:
    try:
        return await ref
    except ray.exceptions.RayError as exc:  # the worker cannot be restarted, or the task cannot be sent
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:2000]
        return result_record(task, thread_for(task.id, prefix), None, 0, 0.0, None, error=error)


def _start(ray: Any, address: str | None, workers: int) -> None:
    if address is not None:
        ray.init(address=address, log_to_driver=False)
        return
    # A local cluster: its CPUs are logical (workers run mostly waiting on models), its dashboard is not needed.
    ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BatchError("a batch on Ray needs the ray extra: pip install 'reinloop[ray]'") from None
    return ray
