"""Which default `max_replans` the evaluation supports: reinloop on the fault grid at several values of it.

Runs reinloop alone, as the evaluation builds it (`reinloop_eval.agents._runners`: the same settings, only
`max_replans` changed), at each of the grid's six points (`GridSpec`'s fault rates x correct rates) and seeds,
for each value of `--replans`; and once the re-asking peer (`REASKING`) for reference. Profiles: `default` is
`reinloop eval --grid`'s, `loops` adds `--runaway-rate 0.2 --stubborn-rate 0.2`. Prints per profile and value:
success over all runs (min-max over the points and over the seeds), tokens per successful run, mean decisions
per run, the finish reasons, and each row paired with the current default (`AgentConfig().max_replans`) and with
the peer over the same runs (task, point, seed: the same draws), with a 95% paired-bootstrap interval.

Run: .venv/bin/python benchmarks/replans.py [--replans 0 1 2] [--profile default|loops|both] [--workers 2]
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import reinloop_eval.run as eval_run
from reinloop import AgentConfig
from reinloop_eval import SUITE, FaultProfile, GridSpec, RunRecord
from reinloop_eval.agents import REASKING, Runner, _reinloop, _runners
from reinloop_eval.report import paired, tokens_per_success
from reinloop_eval.run import REPORTING_SEEDS
from reinloop_eval.simulated import EXTRA_FAULT_RATE, EXTRA_FAULTS

# As benchmarks/evaluation_page.py: `reinloop eval`'s five newer faults at its 0.02, and the loops profile.
EXTRA_ON: dict[str, Any] = {f"{fault}_rate": EXTRA_FAULT_RATE for fault in EXTRA_FAULTS}
PROFILES: dict[str, FaultProfile] = {
    "default": FaultProfile(**EXTRA_ON),
    "loops": FaultProfile(**EXTRA_ON, runaway_rate=0.2, stubborn_rate=0.2),
}
PEER = "peer"  # the variant that runs REASKING instead of reinloop
BASELINE = AgentConfig().max_replans  # the current default: every row is paired with it

Variant = int | str  # a max_replans value, or PEER
Job = tuple[str, FaultProfile, int, Variant, int]  # profile name, point's profile, seed, variant, tasks


def _label(variant: Variant) -> str:
    return REASKING if variant == PEER else f"max_replans={variant}"


def _with_replans(replans: int) -> Any:
    """`_runners`, with reinloop's runner rebuilt from the settings the evaluation gives it plus `replans`."""

    def runners(profile: FaultProfile, real: Any = None) -> dict[str, Runner]:
        table = _runners(profile, real)
        captured = inspect.getclosurevars(table["reinloop"]).nonlocals
        if "settings" not in captured:
            raise RuntimeError("reinloop's runner no longer closes over `settings`: update benchmarks/replans.py")
        table["reinloop"] = _reinloop({**captured["settings"], "max_replans": replans}, captured.get("protocol"))
        return table

    return runners


def run_job(job: Job) -> tuple[Job, list[RunRecord], float]:
    """One suite run of one agent at one point and seed; the records and the CPU seconds it took."""
    _, profile, seed, variant, tasks = job
    start = time.process_time()
    if variant == PEER:
        eval_run._runners = _runners  # type: ignore[attr-defined]  # a worker may have run a patched job
        records = eval_run.evaluate_suite(profile=profile, seed=seed, tasks=tasks, agents=(REASKING,))
    else:
        eval_run._runners = _with_replans(int(variant))  # type: ignore[attr-defined]
        records = eval_run.evaluate_suite(profile=profile, seed=seed, tasks=tasks, agents=("reinloop",))
    return job, records, time.process_time() - start


def run_all(jobs: list[Job], workers: int) -> tuple[dict[tuple[str, Variant], list[RunRecord]], float]:
    """Every job; records keyed by (profile, variant), each relabelled with its variant and its task with the
    point, so that records pair by (task, point, seed) across variants. Returns the CPU seconds as well."""
    results: dict[tuple[str, Variant], list[RunRecord]] = {}
    cpu = 0.0
    # spawn, not fork, as run_grid: a fresh interpreter per worker.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run_job, job) for job in jobs]
        for done, future in enumerate(as_completed(futures), 1):
            (name, profile, _, variant, _), records, seconds = future.result()
            cpu += seconds
            point = f"{profile.fault_rate:g}/{profile.correct_rate:g}"
            results.setdefault((name, variant), []).extend(
                replace(record, agent=_label(variant), task=f"{point}/{record.task}") for record in records
            )
            print(f"  {done}/{len(jobs)} suite runs", file=sys.stderr, flush=True)
    return results, cpu


# aggregating ----------------------------------------------------------------------------------------------


def _point_of(record: RunRecord) -> str:
    return record.task.rsplit("/", 1)[0]


def _rate(records: Sequence[RunRecord]) -> float:
    return sum(record.success for record in records) / len(records)


def _spread(records: Sequence[RunRecord], key: Any) -> tuple[float, float]:
    groups: dict[Any, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    rates = [_rate(group) for group in groups.values()]
    return min(rates), max(rates)


def summary(records: Sequence[RunRecord]) -> dict[str, Any]:
    tokens = sum(record.prompt_tokens + record.completion_tokens for record in records)
    successes = sum(record.success for record in records)
    return {
        "runs": len(records),
        "successes": successes,
        "success_rate": _rate(records),
        "points": _spread(records, _point_of),
        "seeds": _spread(records, lambda record: record.seed),
        "tokens_per_success": tokens_per_success(tokens, successes),
        "mean_decisions": statistics.mean(record.decisions for record in records),
        "tool_calls": statistics.mean(record.tool_calls for record in records),
        "finishes": dict(Counter(record.finish for record in records).most_common()),
    }


def _pair(records: Sequence[RunRecord], row: str, reference: str) -> str:
    if row == reference:
        return "-"
    result = paired(records, reference, baseline=row)  # row's success minus the reference's
    return (
        f"{result['difference'] * 100:+.1f} pp ({result['low'] * 100:+.1f} to {result['high'] * 100:+.1f}; "
        f"+{result['wins']:.0f}/-{result['losses']:.0f})"
    )


def table(name: str, variants: Sequence[Variant], results: dict[tuple[str, Variant], list[RunRecord]]) -> str:
    everything = [record for variant in variants for record in results[(name, variant)]]
    baseline = _label(BASELINE) if BASELINE in variants else None
    lines = [
        f"### {name} profile\n",
        "| agent | success | points min-max | seeds min-max | tokens per success | decisions per run "
        f"| tool calls per run | vs {baseline or 'default'} (paired) | vs peer (paired) | finish reasons |",
        "| --- |" + " ---: |" * 8 + " --- |",
    ]
    for variant in variants:
        row = summary(results[(name, variant)])
        label = _label(variant)
        finishes = ", ".join(f"{reason} {count}" for reason, count in row["finishes"].items())
        versus_baseline = _pair(everything, label, baseline) if baseline else "n/a"
        versus_peer = _pair(everything, label, REASKING) if PEER in variants else "n/a"
        lines.append(
            f"| {label} | {row['success_rate']:.1%} | {row['points'][0]:.0%}-{row['points'][1]:.0%} | "
            f"{row['seeds'][0]:.1%}-{row['seeds'][1]:.1%} | {row['tokens_per_success']:,.0f} | "
            f"{row['mean_decisions']:.2f} | {row['tool_calls']:.2f} | {versus_baseline} | {versus_peer} | {finishes} |"
        )
    return "\n".join(lines)


def point_table(name: str, variants: Sequence[Variant], results: dict[tuple[str, Variant], list[RunRecord]]) -> str:
    """Per point (over its seeds): each variant's success and tokens per successful run."""
    points = list(dict.fromkeys(_point_of(record) for record in results[(name, variants[0])]))
    header = " | ".join(_label(variant) for variant in variants)
    lines = [f"| fault/correct | {header} |", "| --- |" + " ---: |" * len(variants)]
    for point in points:
        cells = []
        for variant in variants:
            runs = [record for record in results[(name, variant)] if _point_of(record) == point]
            row = summary(runs)
            cells.append(f"{row['success_rate']:.1%} / {row['tokens_per_success']:,.0f}")
        lines.append(f"| {point} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replans", type=int, nargs="+", default=[0, 1, 2], metavar="N")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=len(SUITE))
    parser.add_argument("--profile", choices=[*PROFILES, "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(REPORTING_SEEDS), metavar="N")
    parser.add_argument("--no-peer", action="store_true", help="leave out the re-asking peer")
    parser.add_argument("--json", type=Path, help="also write the summaries here")
    args = parser.parse_args()
    if not 1 <= args.tasks <= len(SUITE) or args.workers < 1 or min(args.replans) < 0:
        parser.error(f"--tasks must be 1-{len(SUITE)}, --workers at least 1, --replans at least 0")
    names = list(PROFILES) if args.profile == "both" else [args.profile]
    variants: list[Variant] = [*dict.fromkeys(args.replans), *([] if args.no_peer else [PEER])]
    jobs: list[Job] = [
        (name, profile, seed, variant, args.tasks)
        for name in names
        for profile, seed in GridSpec(seeds=tuple(args.seeds), tasks=args.tasks, base=PROFILES[name]).jobs()
        for variant in variants
    ]
    wall = time.perf_counter()
    results, cpu = run_all(jobs, args.workers)
    wall = time.perf_counter() - wall
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    spec = GridSpec(seeds=tuple(args.seeds), tasks=args.tasks)
    print(f"points: fault rates {spec.fault_rates} x correct rates {spec.correct_rates}; seeds {spec.seeds}; "
          f"{args.tasks} tasks; paired: row - reference, 95% interval, +runs only the row solved/-only the "
          f"reference solved\n")  # fmt: skip
    for name in names:
        print(table(name, variants, results))
        print(f"\nPer point (success / tokens per success), {name} profile:\n")
        print(point_table(name, variants, results) + "\n")
    print(f"wall {wall:.1f} s; CPU {cpu:.1f} s in the jobs, "
          f"{children.ru_utime + children.ru_stime:.1f} s in the worker processes; workers {args.workers}")  # fmt: skip
    if args.json:
        out = {name: {_label(variant): summary(results[(name, variant)]) for variant in variants} for name in names}
        profiles = {name: asdict(PROFILES[name]) for name in names}
        args.json.write_text(json.dumps({"profiles": profiles, "summaries": out}, indent=2))


if __name__ == "__main__":
    main()
