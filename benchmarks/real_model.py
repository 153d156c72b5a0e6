"""The task bank on a real model, sampled: reinloop against the fair best peer and create_agent with middleware,
at a temperature, over several seeds, with tool faults, every agent held to the same budget.

    .venv/bin/python benchmarks/real_model.py --tasks 200 --seeds 100 101 102          # the embedded model
    .venv/bin/python benchmarks/real_model.py --base-url http://host:8000/v1 --model NAME --protocol json

Each run is appended to runs.jsonl in --out as it ends; `--resume` with the same arguments keeps those and runs
the rest (the 1,200 runs of the first command take hours on a CPU: run it in parts, e.g. under nohup, and resume).
`--shard K/N` runs only the K-th of N interleaved parts (K from 0), each process with a model server of its own,
all appending to the same runs.jsonl: the embedded model's server computes on one thread, so on two cores two
parts run about twice as fast. The report is written by a last run without --shard, with --resume.

Every agent gets the same model object (its reply cap: the embedded model's 200 tokens), the same seed for its
n-th model call on a task at a seed, the same tool faults (drawn from the task and seed), at most 20 rounds,
and the same context budget: reinloop's (the embedded model's 3,400 tokens), the peers' prompts held to it
too, counted the same way. The peers meet a text protocol's model through native calls read from its text
(`reinloop_eval.written_calls`). Writes real-model.md and real-model.json (the command in both) to --out and
prints the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import shlex
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reinloop.models import LOCAL, model_from_settings
from reinloop_eval.real_benchmark import (
    BUDGET_NOTE,
    SAMPLED_AGENTS,
    Sampling,
    markdown_sampled,
    paired_costs,
    run_sampled,
    success_intervals,
)
from reinloop_eval.report import paired_all
from reinloop_eval.run import REPORTING_SEEDS, RunRecord
from reinloop_eval.task_bank import BANK_SIZE, task_bank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200, help=f"the task bank's first N (at most {BANK_SIZE})")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(REPORTING_SEEDS), help="default: 100 101 102")
    parser.add_argument("--temperature", type=float, default=Sampling.temperature)
    parser.add_argument("--tool-fault-rate", type=float, default=Sampling.tool_fault_rate)
    parser.add_argument("--agents", nargs="+", default=list(SAMPLED_AGENTS), help="default: %(default)s")
    parser.add_argument("--protocol", default="json", help="the text protocol (embedded model: json react call_tool)")
    parser.add_argument("--model", help="the server's model name (with --base-url)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server; default: the embedded model")
    parser.add_argument("--out", type=Path, default=Path("real-model-benchmark"))
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs --out's runs.jsonl holds (an interrupted benchmark's, same arguments) and run the rest",
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="K/N",
        help="run only the K-th (from 0) of N interleaved parts of the runs, with --resume; writes no report",
    )
    args = parser.parse_args()
    sharded = args.shard != (0, 1)
    if sharded and not args.resume:
        parser.error("--shard appends to runs.jsonl beside the other parts: give --resume too")
    sampling = Sampling(temperature=args.temperature, seeds=tuple(args.seeds), tool_fault_rate=args.tool_fault_rate)
    tasks = task_bank(args.tasks)
    command = shlex.join(
        [".venv/bin/python", "benchmarks/real_model.py", *[a for a in sys.argv[1:] if a != "--resume"]]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"  # each run as it ends, for --resume
    done = (
        [RunRecord(**json.loads(line)) for line in log.read_text().splitlines()] if args.resume and log.exists() else []
    )
    if not args.resume:
        log.write_text("")

    def keep(record: RunRecord) -> None:
        with log.open("a") as file:
            fcntl.flock(file, fcntl.LOCK_EX)  # the other parts append to the same file
            file.write(json.dumps(dataclasses.asdict(record)) + "\n")

    console = Console()
    started, cpu = time.perf_counter(), time.process_time()
    with (
        model_from_settings(args.model or (None if args.base_url else LOCAL), args.base_url, args.protocol) as real,
        Progress(
            TextColumn("[bold]runs[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
        ) as bar,  # fmt: skip
    ):
        # A part's runs and the other parts' runs done before it started, in an order it cannot know ahead.
        job = bar.add_task("", total=None if sharded else len(tasks) * len(sampling.seeds) * len(args.agents))

        def advance(agent: str, task: str, seed: int) -> None:
            bar.update(job, advance=1, description=f"{agent} / {task} / seed {seed}")
            if not console.is_terminal:  # a log (nohup): one line a run
                console.print(f"{time.perf_counter() - started:7.0f} s  {agent} / {task} / seed {seed}", markup=False)

        records = run_sampled(
            real, tasks, sampling=sampling, agents=args.agents, progress=advance, done=done, on_record=keep,
            shard=args.shard,
        )  # fmt: skip
        label = "the embedded model" if real.label == LOCAL else real.label
        config = real.config
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if sharded:
        part, parts = args.shard
        console.print(
            f"part {part}/{parts} done ({wall:,.0f} s wall, {cpu:,.0f} s CPU); {log} holds "
            f"{len(log.read_text().splitlines())} runs. When every part is done, run again without --shard, "
            "with --resume, to write the report.",
            markup=False,
        )
        return
    table, runs_wall = markdown_sampled(records), sum(record.wall_s for record in records)
    text = (
        f"`{command}`\n\n{label}, protocol {real.protocol}: {len(tasks)} tasks x {len(sampling.seeds)} seeds "
        f"({', '.join(map(str, sampling.seeds))}) x {len(args.agents)} agents = {len(records)} runs, temperature "
        f"{sampling.temperature:g}, tool fault rate {sampling.tool_fault_rate:g}; reply cap "
        f"{config.get('max_reply_tokens')} tokens, context budget {config.get('context_token_budget')} tokens. "
        f"{BUDGET_NOTE} {wall:,.0f} s wall, {cpu:,.0f} s CPU in this process (the model runs in its own); the "
        f"runs' own wall times sum to {runs_wall / 3600:,.1f} h (resumed runs included).\n\n"
        f"{table}\n"
    )
    console.print(text, markup=False, highlight=False)
    (args.out / "real-model.md").write_text(text)
    result = {
        "command": command,
        "model": label,
        "protocol": real.protocol,
        "sampling": dataclasses.asdict(sampling),
        "tasks": len(tasks),
        "agents": args.agents,
        "config": config,
        "wall_s": round(wall, 1),
        "runs_wall_s": round(runs_wall, 1),
        "cpu_s": round(cpu, 1),
        "success": success_intervals(records),
        "paired": paired_all(records),
        "paired_costs": paired_costs(records),
        "runs": [dataclasses.asdict(record) for record in records],
    }
    (args.out / "real-model.json").write_text(json.dumps(result, indent=2))
    console.print(f"wrote {args.out / 'real-model.md'} and {args.out / 'real-model.json'}")


def _shard(text: str) -> tuple[int, int]:
    part, _, parts = text.partition("/")
    try:
        shard = int(part), int(parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give K/N, e.g. 0/2") from None
    if not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be 0 to N - 1")
    return shard


if __name__ == "__main__":
    main()
