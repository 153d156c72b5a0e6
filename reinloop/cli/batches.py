"""`reinloop batch TASKS.jsonl`: one run per task, in this process or on Ray, results appended to a JSONL file,
a progress bar on stderr and a summary at the end (over `reinloop.batch` and `reinloop.batch_ray`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from reinloop.batch import (
    BatchError,
    BatchLimits,
    BatchSummary,
    Prices,
    ResultsFile,
    RunAgent,
    arun_many,
    read_tasks,
)
from reinloop.checkpoint import database_label
from reinloop.cli import CommandError, Interrupted
from reinloop.runs import LIMITS, default_db

__all__ = ["add_batch_options", "batch"]


def add_batch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tasks", type=Path, help='a JSONL file, one {"id": ..., "task": "..."} a line')
    parser.add_argument(
        "--agent",
        metavar="MODULE:FUNCTION",
        help="the agent factory, called as FUNCTION(checkpointer, rate_limiter) once per process (default: the "
        "agent of 'reinloop run', with --model and the other agent options)",
    )
    parser.add_argument("--results", type=Path, help="the results file (default: TASKS with .results.jsonl)")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once, in all (default: 8)")
    parser.add_argument("--attempts", type=int, default=3, help="tries of a task that raises (default: 3)")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="the batch's budget: no new run once spent")
    parser.add_argument("--max-cost", type=float, metavar="USD", help="the batch's budget in dollars (with --prices)")
    parser.add_argument(
        "--prices", metavar="IN,OUT", help="dollars per million prompt and completion tokens, e.g. 0.15,0.6"
    )
    parser.add_argument("--rate-limit", type=float, metavar="RPS", help="model calls a second, in all")
    parser.add_argument("--thread-prefix", default="batch:", help="thread ids are PREFIX + task id (default: batch:)")
    parser.add_argument("--ray", action="store_true", help="run on Ray (a local cluster unless --ray-address)")
    parser.add_argument("--ray-address", metavar="ADDRESS", help="a running Ray cluster's address (implies --ray)")
    parser.add_argument("--workers", type=int, default=2, help="Ray worker processes (default: 2)")
    parser.add_argument("--per-worker", type=int, default=16, help="runs at once per Ray worker (default: 16)")


def batch(args: argparse.Namespace, console: Console) -> int:
    try:
        tasks = read_tasks(args.tasks)
        limits = BatchLimits(
            concurrency=args.concurrency,
            attempts=args.attempts,
            max_tokens=args.max_tokens,
            max_cost_usd=args.max_cost,
            requests_per_second=args.rate_limit,
        )
    except BatchError as exc:
        raise CommandError(str(exc)) from None
    prices = _prices(args.prices)
    results = args.results or args.tasks.with_suffix(".results.jsonl")
    db = args.db or str(default_db())
    factory: Any = args.agent or _run_agent(args)
    already = ResultsFile(results).read()
    to_run = sum(task.id not in already for task in tasks)
    errors = Console(stderr=True)
    bar = Progress(TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=errors, disable=getattr(args, "quiet", False))  # fmt: skip
    with bar:
        progress = bar.add_task("", total=to_run)

        def told(record: dict[str, Any]) -> None:
            bar.update(progress, advance=1, description=f"{record['id']}: {record['finish_reason']}")

        try:
            summary = _run(args, factory, tasks, db, results, limits, prices, told)
        except BatchError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            written = len(ResultsFile(results).read())
            raise Interrupted(
                f"interrupted: {written} of {len(tasks)} tasks have a result in {results}; the runs in flight are "
                "saved up to their last step: run the same command again to finish the batch"
            ) from None
    _print_summary(console, summary, results, database_label(db))
    return 0 if not summary.reasons.get("error") and not summary.not_started else 1


def _run(args: argparse.Namespace, factory: Any, tasks: Any, db: str, results: Path, limits: BatchLimits,
         prices: Prices | None, told: Any) -> BatchSummary:  # fmt: skip
    common = {"db": db, "results": results, "limits": limits, "prices": prices, "prefix": args.thread_prefix}
    if args.ray or args.ray_address:
        from reinloop.batch_ray import run_many_on_ray

        return run_many_on_ray(factory, tasks, **common, workers=args.workers, per_worker=args.per_worker,
                               address=args.ray_address, on_result=told)  # fmt: skip
    return asyncio.run(arun_many(factory, tasks, **common, on_result=told))


def _run_agent(args: argparse.Namespace) -> RunAgent:
    limits = tuple((key, getattr(args, key)) for key in LIMITS if getattr(args, key, None) is not None)
    approve = ",".join(args.approve) if args.approve else None
    return RunAgent(model=args.model, base_url=args.base_url, protocol=args.protocol, preset=args.preset,
                    workspace=str(args.workspace), approve=approve, mcp_config=args.mcp_config,
                    mcp_prefix=args.mcp_prefix, limits=limits, yes=args.yes)  # fmt: skip


def _prices(text: str | None) -> Prices | None:
    if text is None:
        return None
    try:
        prompt, completion = (float(part) for part in text.split(","))
    except ValueError:
        raise CommandError(f"--prices takes two numbers, IN,OUT (dollars per million tokens), not {text!r}") from None
    return Prices(prompt, completion)


def _print_summary(console: Console, summary: BatchSummary, results: Path, db: str) -> None:
    table = Table(title="batch", show_header=False, box=None)
    table.add_row("tasks", str(summary.tasks))
    table.add_row("already answered", str(summary.skipped))
    table.add_row("run now", str(summary.ran))
    for reason, count in sorted(summary.reasons.items()):
        table.add_row(f"  {reason}", str(count))
    if summary.not_started:
        table.add_row("not started (budget spent)", str(summary.not_started))
    table.add_row("tokens", f"{summary.tokens:,}")
    if summary.cost_usd:
        table.add_row("cost", f"${summary.cost_usd:.4f}")
    table.add_row("time", f"{summary.seconds:.1f} s wall, {summary.cpu_seconds:.1f} s CPU (this process)")
    table.add_row("results", str(results))
    table.add_row("runs saved in", db)
    console.print(table)
    console.print(json.dumps({"summary": summary.to_dict()}), soft_wrap=True, markup=False, highlight=False)
