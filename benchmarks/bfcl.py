"""BFCL (the Berkeley Function Calling Leaderboard) through reinloop and the peers, scored by BFCL's checkers.

    .venv/bin/python benchmarks/bfcl.py --sample 50 --fault-rate 0.3                # the replaying model
    .venv/bin/python benchmarks/bfcl.py --model-kind local --sample 5 --seeds 0      # the embedded model
    .venv/bin/python benchmarks/bfcl.py --model-kind endpoint --base-url http://host:8000/v1 --model NAME

The categories: the four AST ones (simple_python, multiple, parallel, parallel_multiple; the calls made are
recorded and scored by BFCL's AST checker, nothing runs) and multi_turn_base (the calls run in BFCL's
environments, scored by its multi-turn checker). The replaying model answers each turn with the ground truth's
calls under the evaluation's seeded faults at --fault-rate (`reinloop_eval.bfcl.replay_faults`); a real model
makes its own mistakes (no faults injected; a seed changes nothing under greedy decoding). BFCL runs in its own
environment, made on first use (`reinloop_eval.bfcl.install`; REINLOOP_BFCL_PYTHON names another). Writes
bfcl.md and bfcl.json to --out and prints the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reinloop_eval.bfcl import (
    BFCL_AGENTS,
    BFCL_VERSION,
    CATEGORIES,
    Bfcl,
    BfclRecord,
    load_tasks,
    replay_faults,
    run_bfcl,
    write_bfcl_report,
)
from reinloop_eval.run import REPORTING_SEEDS

MODEL_KINDS = ("replay", "local", "endpoint")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--categories", nargs="+", choices=CATEGORIES, default=list(CATEGORIES))
    parser.add_argument("--sample", type=int, default=50, help="tasks per category, a seeded sample (0: all)")
    parser.add_argument("--model-kind", choices=MODEL_KINDS, default="replay")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="the replaying model's faults")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(REPORTING_SEEDS))
    parser.add_argument("--agents", nargs="+", default=list(BFCL_AGENTS))
    parser.add_argument("--model", help="with --model-kind endpoint: the server's model name")
    parser.add_argument("--base-url", help="with --model-kind endpoint: an OpenAI-compatible server")
    parser.add_argument("--protocol", help="a real model's protocol (default: the model's own)")
    parser.add_argument("--out", type=Path, default=Path("bfcl-benchmark"))
    args = parser.parse_args()
    if args.model_kind == "endpoint" and not args.base_url:
        parser.error("--model-kind endpoint needs --base-url")
    console = Console()
    started = time.perf_counter()
    with Bfcl() as bfcl, _model(args) as real:
        tasks = load_tasks(bfcl, args.categories, args.sample or None)
        records = _run(console, tasks, bfcl, args, real)
    settings: dict[str, Any] = {
        "bfcl_eval": BFCL_VERSION,
        "categories": args.categories,
        "sample_per_category": args.sample or "all",
        "tasks": len(tasks),
        "model": args.model_kind if real is None else real.label,
        "fault_rate": args.fault_rate if real is None else None,
        "seeds": args.seeds,
        "agents": args.agents,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    console.print(write_bfcl_report(records, settings, args.out), markup=False)
    console.print(f"wrote {args.out / 'bfcl.md'} and {args.out / 'bfcl.json'}")


@contextlib.contextmanager
def _model(args: argparse.Namespace) -> Iterator[Any]:
    """None for the replaying model, else the real model's `ChosenModel` for the duration of the block."""
    if args.model_kind == "replay":
        yield None
        return
    from reinloop.models import LOCAL, model_from_settings

    name = LOCAL if args.model_kind == "local" else args.model
    with model_from_settings(name, args.base_url, args.protocol) as chosen:
        yield chosen


def _run(console: Console, tasks: list[Any], bfcl: Bfcl, args: argparse.Namespace, real: Any) -> list[BfclRecord]:
    total = len(tasks) * len(args.agents) * len(args.seeds)
    columns = (BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(TextColumn("[bold]BFCL[/bold]"), *columns, console=console) as bar:
        job = bar.add_task("", total=total)

        def advance(record: BfclRecord) -> None:
            bar.update(job, advance=1, description=f"{record.agent} / {record.task}")

        return run_bfcl(
            tasks,
            bfcl,
            agents=args.agents,
            seeds=args.seeds,
            profile=replay_faults(args.fault_rate),
            real=real,
            progress=advance,
        )


if __name__ == "__main__":
    main()
