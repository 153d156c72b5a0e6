"""How a batch scales: 1,000 tasks whose scripted model waits a realistic latency per decision, run one at a time,
as plain `asyncio.gather` of `ainvoke` in one process, with `run_many` in one process (SQLite), and on a local
Ray cluster of 1, 2 and 4 worker processes over PostgreSQL at several concurrencies per worker.

Each task takes STEPS tool calls and an answer (STEPS + 1 decisions, each waiting --latency seconds on the event
loop). One at a time is measured on --sample tasks and multiplied out to the batch. Per row: wall time,
tasks a second, the speed-up over one at a time, and CPU: this process's, the whole machine's (from /proc/stat:
run it on an idle machine) and PostgreSQL's server processes', each per run; checkpoints written per run.

    .venv/bin/python benchmarks/batch_scaling.py --postgres-url postgresql://postgres:postgres@127.0.0.1:5432/reinloop_test

Each process on PostgreSQL holds two connections (its saver's and its lease session), however many runs it has
going. Writes scaling.md, scaling.json and scaling.png to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reinloop.batch import BatchLimits, BatchTask, run_many, thread_for
from reinloop.checkpoint import aopen_checkpointer

FACTORY = "tests.batch_agents:stepping_agent"


@dataclass
class Row:
    mode: str
    workers: int
    concurrency: int
    tasks: int
    wall_s: float
    answered: int
    driver_cpu_ms_per_run: float
    machine_cpu_ms_per_run: float
    postgres_cpu_ms_per_run: float | None
    checkpoints_per_run: float | None
    measured_tasks: int

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_s


def machine_cpu_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float:
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime and stime, and cutime and cstime: the server's backends that ended (a lease's connection ends
        # with its run) are counted in the postmaster's children's time.
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def checkpoints(url: str | None, prefix: str) -> int | None:
    if url is None:
        return None
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id LIKE %s", (prefix + "%",)).fetchone()
    return int(row[0]) if row else 0


class Meter:
    def __init__(self, url: str | None) -> None:
        self.url = url

    def __enter__(self) -> Meter:
        self.start()
        return self

    def start(self) -> None:
        """(Re)start the clocks."""
        self.wall, self.cpu, self.machine = time.perf_counter(), time.process_time(), machine_cpu_s()
        self.pg = postgres_cpu_s() if self.url else 0.0

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.machine = machine_cpu_s() - self.machine
        self.pg = (postgres_cpu_s() - self.pg) if self.url else 0.0


def _tasks(count: int) -> list[BatchTask]:
    return [BatchTask(id=f"t{i}", task=f"task {i}") for i in range(count)]


def _row(mode: str, workers: int, concurrency: int, tasks: int, meter: Meter, answered: int, url: str | None,
         prefix: str, measured: int | None = None) -> Row:  # fmt: skip
    measured = measured or tasks
    saved = checkpoints(url, prefix)
    return Row(mode, workers, concurrency, tasks, meter.wall * tasks / measured, answered,
               1000 * meter.cpu / measured, 1000 * meter.machine / measured,
               1000 * meter.pg / measured if url else None, saved / measured if saved is not None else None,
               measured)  # fmt: skip


def one_at_a_time(sample: int, tasks: int, folder: Path) -> Row:
    from tests.batch_agents import stepping_agent

    async def go() -> int:
        async with aopen_checkpointer(folder / "one.sqlite") as saver:
            agent = stepping_agent(saver, None)
            # One task first, untimed: the first run's imports and set-up are no part of a task's time.
            await agent.ainvoke({"task": "warm up"}, {"configurable": {"thread_id": f"warm-{time.time_ns()}"}})
            meter.start()
            answered = 0
            prefix = f"one-{time.time_ns()}:"  # threads of their own: a draw must not continue an earlier one's
            for task in _tasks(sample):
                config = {"configurable": {"thread_id": thread_for(task.id, prefix)}}
                out = await agent.ainvoke({"task": task.task}, config)
                answered += out["finish_reason"] == "answered"
            return answered

    meter = Meter(None)
    with meter:
        answered = asyncio.run(go())
    return _row("one at a time (measured on a sample, multiplied out)", 1, 1, tasks, meter, answered, None, "",
                measured=sample)  # fmt: skip


def gathered(tasks: int, folder: Path, url: str | None) -> Row:
    """Plain asyncio.gather of every ainvoke at once: no results file, no retries, no limit."""
    from tests.batch_agents import stepping_agent

    prefix = f"gather-{time.time_ns()}:"

    async def go() -> int:
        async with aopen_checkpointer(url or folder / "gather.sqlite") as saver:
            agent = stepping_agent(saver, None)
            runs = [agent.ainvoke({"task": t.task}, {"configurable": {"thread_id": thread_for(t.id, prefix)}})
                    for t in _tasks(tasks)]  # fmt: skip
            outs = await asyncio.gather(*runs)
        return sum(out["finish_reason"] == "answered" for out in outs)

    with Meter(url) as meter:
        answered = asyncio.run(go())
    mode = "asyncio.gather of ainvoke, one process, " + ("PostgreSQL" if url else "SQLite")
    return _row(mode, 1, tasks, tasks, meter, answered, url, prefix)


def in_process(tasks: int, concurrency: int, folder: Path, url: str | None) -> Row:
    prefix = f"many-{time.time_ns()}:"
    results = folder / f"{prefix.strip(':')}.jsonl"
    with Meter(url) as meter:
        summary = run_many(FACTORY, _tasks(tasks), db=url or folder / "many.sqlite", results=results,
                           limits=BatchLimits(concurrency=concurrency), prefix=prefix)  # fmt: skip
    mode = "run_many, one process, " + ("PostgreSQL" if url else "SQLite")
    return _row(mode, 1, concurrency, tasks, meter, summary.reasons["answered"], url, prefix)


def on_ray(tasks: int, workers: int, per_worker: int, folder: Path, url: str) -> Row:
    import ray

    from reinloop.batch_ray import run_many_on_ray

    prefix = f"ray-{time.time_ns()}:"
    results = folder / f"{prefix.strip(':')}.jsonl"
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        handles: list[Any] = []
        # Started before the clock: a cluster starts once and serves many batches.
        with Meter(url) as meter:
            summary = run_many_on_ray(FACTORY, _tasks(tasks), db=url, results=results, workers=workers,
                                      per_worker=per_worker, prefix=prefix, on_workers=handles.extend,
                                      limits=BatchLimits(concurrency=workers * per_worker))  # fmt: skip
    finally:
        ray.shutdown()
    return _row("Ray, PostgreSQL", workers, workers * per_worker, tasks, meter, summary.reasons["answered"], url,
                prefix)  # fmt: skip


def markdown(draws: list[list[Row]], args: argparse.Namespace, command: str) -> str:
    """One line a configuration: wall time, tasks a second and speed-up (each draw's one-at-a-time over its own
    row) as the mean over the draws with their range; CPU figures the mean."""
    lines = [
        f"{args.tasks} tasks, {args.steps} tool calls and an answer each ({args.steps + 1} decisions of "
        f"{args.latency:g} s), {len(draws)} draws (mean, and range). Command: `{command}`",
        "",
        "| mode | workers | runs at once | wall (s) | tasks/s | speed-up | CPU ms/run (driver) | CPU ms/run "
        "(machine) | PostgreSQL CPU ms/run | checkpoints/run | answered |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for index, row in enumerate(draws[0]):
        same = [draw[index] for draw in draws]
        ups = [draw[0].wall_s / draw[index].wall_s for draw in draws]
        pg = _mean([r.postgres_cpu_ms_per_run for r in same])
        saved = _mean([r.checkpoints_per_run for r in same])
        lines.append(
            f"| {row.mode} | {row.workers} | {row.concurrency} | {_spread([r.wall_s for r in same], '.1f')} | "
            f"{_spread([r.tasks_per_s for r in same], '.1f')} | {_spread(ups, '.1f')}x | "
            f"{_mean([r.driver_cpu_ms_per_run for r in same]):.1f} | "
            f"{_mean([r.machine_cpu_ms_per_run for r in same]):.1f} | "
            f"{'-' if pg is None else f'{pg:.1f}'} | {'-' if saved is None else f'{saved:.1f}'} | "
            f"{sum(r.answered for r in same)}/{sum(r.measured_tasks for r in same)} |"
        )
    return "\n".join(lines) + "\n"


def _mean(values: list[Any]) -> Any:
    return None if values[0] is None else sum(values) / len(values)


def _spread(values: list[float], form: str) -> str:
    mean = sum(values) / len(values)
    return f"{mean:{form}}" if len(values) == 1 else f"{mean:{form}} ({min(values):{form}}-{max(values):{form}})"


def plot(draws: list[list[Row]], path: Path) -> None:
    """Tasks a second (the mean over the draws) against runs at once, a line a mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = draws[0]
    speed = [sum(draw[index].tasks_per_s for draw in draws) / len(draws) for index in range(len(rows))]
    baseline = speed[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    groups: dict[str, list[tuple[int, float]]] = {}
    for row, tasks_per_s in zip(rows[1:], speed[1:], strict=True):
        label = f"{row.mode} ({row.workers} worker{'s' if row.workers > 1 else ''})" if "Ray" in row.mode else row.mode
        groups.setdefault(label, []).append((row.concurrency, tasks_per_s))
    for label, group in groups.items():
        group.sort()
        ax.plot([c for c, _ in group], [t for _, t in group], marker="o", label=label)
    ax.axhline(50 * baseline, color="grey", linestyle="--", label="50x one at a time")
    ax.axhline(baseline, color="black", linestyle=":", label="one at a time")
    ax.set_xscale("log")
    ax.set_xlabel("runs at once (in all)")
    ax.set_ylabel("tasks a second")
    ax.set_title(f"{rows[0].tasks} tasks, {rows[0].wall_s / rows[0].tasks:.1f} s each alone")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds a decision waits (default: 1)")
    parser.add_argument("--steps", type=int, default=2, help="tool calls a task (default: 2)")
    parser.add_argument("--sample", type=int, default=10, help="tasks run one at a time (default: 10)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[100, 250, 1000], help="in one process")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--per-worker", type=int, nargs="+", default=[100, 250])
    parser.add_argument("--postgres-url", help="PostgreSQL for the Ray rows (none: no Ray rows)")
    parser.add_argument("--repeats", type=int, default=2, help="draws of every configuration (default: 2)")
    parser.add_argument("--out", type=Path, default=Path("batch-scaling"))
    args = parser.parse_args()
    os.environ["REINLOOP_BATCH_LATENCY"], os.environ["REINLOOP_BATCH_STEPS"] = str(args.latency), str(args.steps)
    os.environ.pop("REINLOOP_BATCH_LEDGER", None)
    url = args.postgres_url
    command = shlex.join([".venv/bin/python", "benchmarks/batch_scaling.py", *sys.argv[1:]])
    folder = Path(tempfile.mkdtemp(prefix="batch-scaling-"))
    configs: list[Callable[[], Row]] = [
        partial(one_at_a_time, args.sample, args.tasks, folder),
        partial(gathered, args.tasks, folder, None),
        *[partial(in_process, args.tasks, concurrency, folder, None) for concurrency in args.concurrency],
    ]
    if url:
        configs.append(partial(gathered, args.tasks, folder, url))
        configs += [partial(on_ray, args.tasks, w, per, folder, url) for w in args.workers for per in args.per_worker]
    draws = []
    for draw in range(args.repeats):  # each draw runs every configuration, so the machine's drift falls on all
        draws.append([config() for config in configs])
        print(f"draw {draw + 1} of {args.repeats} done", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.md").write_text(markdown(draws, args, command))
    (args.out / "scaling.json").write_text(json.dumps({"command": command, "draws": [
        [asdict(row) | {"tasks_per_s": row.tasks_per_s} for row in draw] for draw in draws]}))  # fmt: skip
    plot(draws, args.out / "scaling.png")
    print((args.out / "scaling.md").read_text())


if __name__ == "__main__":
    main()
