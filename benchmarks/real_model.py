"""The suite's tasks on a real model: reinloop against the peers, in each protocol the model speaks.

    .venv/bin/python benchmarks/real_model.py --tasks 14                  # the embedded model, every text protocol
    .venv/bin/python benchmarks/real_model.py --base-url http://host:8000/v1 --model NAME --protocols tool_calling

No faults are injected: the model makes its own mistakes. The embedded model has no tool-calling API, so the
peers (create_agent, alone and with middleware) meet it through native calls read from its text in the same
protocol reinloop uses (`reinloop_eval.written_calls`): the same prompt format and parser for every agent.
Decoding is greedy, so a rerun gives the same runs. Writes real-model.md and real-model.json to --out, each
protocol's full report (report.md, report.json) in a folder of its own, and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reinloop_eval import FaultProfile
from reinloop_eval.benchmark import run_benchmark
from reinloop_eval.run import AGENTS

PROTOCOLS = ("json", "react", "call_tool")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=14, help="the first N of the suite's 50 tasks")
    parser.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), help="default: json react call_tool")
    parser.add_argument("--model", help="a model name (with --base-url, the server's; else init_chat_model's)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server; default: the embedded model")
    parser.add_argument("--out", type=Path, default=Path("real-model-benchmark"))
    args = parser.parse_args()
    console = Console()
    local = not (args.model or args.base_url)
    results: dict[str, dict[str, object]] = {}
    sections = []
    for protocol in args.protocols:
        started, cpu = time.perf_counter(), time.process_time()
        with Progress(
            TextColumn(f"[bold]{protocol}[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            job = bar.add_task("starting the model", total=args.tasks * len(AGENTS))

            def advance(done: int, total: int, agent: str, task: str, job: object = job, bar: Progress = bar) -> None:
                bar.update(job, completed=done, total=total, description=f"{agent} / {task}")  # type: ignore[arg-type]

            result = run_benchmark(
                FaultProfile(),
                tasks=args.tasks,
                out=args.out / protocol,
                model=args.model,
                base_url=args.base_url,
                local=local,
                protocol=protocol,
                progress=advance,
            )
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        results[protocol] = {"summary": result.summary, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
        model = "the embedded model" if local else (args.model or args.base_url)
        sections.append(
            f"### {protocol}\n\n{model}, the first {args.tasks} tasks, {wall:,.0f} s wall ({cpu:,.0f} s CPU in "
            f"this process; the model runs in its own).\n\n{result.table}\n"
        )
        console.print(sections[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real-model.md").write_text("\n".join(sections))
    (args.out / "real-model.json").write_text(json.dumps(results, indent=2))
    console.print(f"wrote {args.out / 'real-model.md'} and {args.out / 'real-model.json'}")


if __name__ == "__main__":
    main()
