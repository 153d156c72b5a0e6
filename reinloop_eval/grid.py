"""The fault grid (`reinloop eval --grid`): the suite at every fault rate x correct rate, over several seeds,
each point aggregated over its seeds; the table as markdown and JSON (reinloop against every peer, and against
each of its ablations: what each guard buys), and a heatmap of reinloop against the best of its peers."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, ClassVar

from reinloop_eval.agents import ABLATIONS, FAIR_PEER, PEER_AGENTS
from reinloop_eval.costly_report import costly_measures, costly_section_grid
from reinloop_eval.report import markdown_ablations, run_tokens
from reinloop_eval.run import (
    AGENTS,
    BUDGET,
    METRICS,
    REPORTING_SEEDS,
    RunRecord,
    evaluate_suite,
    paired_all,
    pyplot,
    save_chart,
    summarize_runs,
    tokens_per_success,
)
from reinloop_eval.simulated import FAULT_MODEL, FaultProfile
from reinloop_eval.tasks import SUITE, tasks_for

__all__ = ["GRID_FILES", "Grid", "GridSpec", "markdown_ablation_grid", "run_grid"]

GRID_FILES = ("grid.md", "grid.json", "grid.png")
REFERENCE = FAIR_PEER  # the bar: the peer that recovers every unreadable reply, as reinloop does
PEERS = PEER_AGENTS  # the agents "the best peer" is chosen from (reinloop's ablations are not peers)
# Summed over a point's seeds; the rest of an agent's summary is averaged over them.
COUNTS = (
    "runs", "successes", "model_calls", "prompt_tokens", "completion_tokens", "tool_schema_tokens", "wasted_tool_calls",
    "over_budget_runs", "crashes", "sim_s", "cache_read_tokens", "cache_write_tokens",
)  # fmt: skip


@dataclass(frozen=True)
class GridSpec:
    """Which points and seeds to run: `base` holds the faults the grid does not vary (tool faults, runaway,
    stubborn loop, latency); each point sets its fault rate and correct rate."""

    fault_rates: tuple[float, ...] = (0.1, 0.3, 0.5)
    correct_rates: tuple[float, ...] = (0.3, 0.7)
    seeds: tuple[int, ...] = REPORTING_SEEDS
    tasks: int = len(SUITE)
    base: FaultProfile = field(default_factory=FaultProfile)

    def jobs(self) -> list[tuple[FaultProfile, int]]:
        """One suite run per point and seed: the point's profile and the seed."""
        return [
            (replace(self.base, fault_rate=fault, correct_rate=correct), seed)
            for fault in self.fault_rates
            for correct in self.correct_rates
            for seed in self.seeds
        ]

    def settings(self) -> dict[str, Any]:
        varied = {"fault_rate", "correct_rate"}
        fixed = {key: value for key, value in asdict(self.base).items() if key not in varied}
        return {"fault_rates": list(self.fault_rates), "correct_rates": list(self.correct_rates),
                "seeds": list(self.seeds), "tasks": self.tasks, "budget": BUDGET, **fixed}  # fmt: skip


@dataclass(frozen=True)
class Grid:
    """What a grid run wrote: one aggregate per point, the markdown table, and the files."""

    CHART: ClassVar[str] = "grid.png"

    points: list[dict[str, Any]]
    table: str
    files: list[Path] = field(default_factory=list)
    chart: bool = False  # grid.png needs the eval extra's matplotlib


def run_grid(
    spec: GridSpec, *, out: Path, workers: int = 1, progress: Callable[[int, int], None] | None = None
) -> Grid:
    """Every agent on the first `spec.tasks` tasks at each point and seed of `spec`; grid.md, grid.json and
    (with matplotlib) grid.png are written to `out`. `workers` > 1 runs the point-seed pairs in as many
    processes, started afresh (spawn): from a script, call it under ``if __name__ == "__main__":``.
    `progress(done, total)` is called as runs finish."""
    jobs = spec.jobs()
    total = len(jobs) * len(tasks_for(spec.base, spec.tasks)) * len(AGENTS)
    results = _run_jobs(jobs, spec.tasks, workers, total, progress)
    points = [_point(spec, fault, correct, results) for fault in spec.fault_rates for correct in spec.correct_rates]
    return _write(spec, points, out)


def _run_jobs(
    jobs: list[tuple[FaultProfile, int]],
    tasks: int,
    workers: int,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> dict[tuple[float, float, int], list[RunRecord]]:
    done = 0

    def advance(runs: int) -> None:
        nonlocal done
        done += runs
        if progress:
            progress(done, total)

    results: dict[tuple[float, float, int], list[RunRecord]] = {}
    if workers <= 1:
        for profile, seed in jobs:
            key = (profile.fault_rate, profile.correct_rate, seed)
            results[key] = evaluate_suite(profile=profile, seed=seed, tasks=tasks, progress=lambda *_: advance(1))
        return results
    # spawn, not fork: the parent has threads (the progress display) that a fork would copy mid-flight.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_suite, profile, seed, tasks): (profile, seed) for profile, seed in jobs}
        for future in as_completed(futures):
            profile, seed = futures[future]
            results[(profile.fault_rate, profile.correct_rate, seed)] = records = future.result()
            advance(len(records))
    return results


def _suite(profile: FaultProfile, seed: int, tasks: int) -> list[RunRecord]:
    return evaluate_suite(profile=profile, seed=seed, tasks=tasks)


# aggregating ----------------------------------------------------------------------------------------------


def _point(
    spec: GridSpec, fault: float, correct: float, results: dict[tuple[float, float, int], list[RunRecord]]
) -> dict[str, Any]:
    """A point's aggregate over its seeds: per agent, the mean success and its spread (min-max across the
    seeds), the counts summed over the seeds, the tokens per successful run over all its runs; then reinloop
    against the best peer, its tokens per successful run against the reference peer's (REFERENCE),
    and reinloop paired with each other agent over the point's runs, in success and in tokens per run."""
    per_seed = {seed: summarize_runs(results[(fault, correct, seed)]) for seed in spec.seeds}
    records = [record for seed in spec.seeds for record in results[(fault, correct, seed)]]
    agents = {agent: _over_seeds([per_seed[seed][agent] for seed in spec.seeds]) for agent in AGENTS}
    best = max(PEERS, key=lambda agent: agents[agent]["success_rate"])
    return {
        "fault_rate": fault,
        "correct_rate": correct,
        "agents": agents,
        "best_peer": best,
        "reinloop_minus_best_peer": agents["reinloop"]["success_rate"] - agents[best]["success_rate"],
        "reference": REFERENCE,
        "tokens_per_success_vs_reference": _ratio(agents, lambda row: row["tokens_per_success"]),
        "message_tokens_vs_reference": _ratio(agents, lambda row: row["prompt_tokens"] - row["tool_schema_tokens"]),
        # every other agent paired with reinloop over the point's runs (task x seed), with a 95% interval
        "paired": paired_all(records),
        "paired_tokens": paired_all(records, measure=run_tokens),
        "costly": costly_measures(records),  # harm and hopeless tasks' cost: empty without the costly faults
        "seeds": {str(seed): per_seed[seed] for seed in spec.seeds},
    }


def _ratio(agents: dict[str, dict[str, float]], tokens: Callable[[dict[str, float]], float]) -> float:
    """reinloop's tokens relative to the reference peer's, as `tokens` counts them."""
    return tokens(agents["reinloop"]) / max(1, tokens(agents[REFERENCE]))


def _over_seeds(summaries: Sequence[dict[str, float]]) -> dict[str, float]:
    rates = [summary["success_rate"] for summary in summaries]
    row = {key: sum(summary[key] for summary in summaries) for key in COUNTS}
    row["mean_iterations"] = statistics.mean(summary["mean_iterations"] for summary in summaries)
    row["tokens_per_success"] = tokens_per_success(row["prompt_tokens"] + row["completion_tokens"], row["successes"])
    return {"success_rate": statistics.mean(rates), "success_min": min(rates), "success_max": max(rates), **row}


# the report -----------------------------------------------------------------------------------------------


def _write(spec: GridSpec, points: list[dict[str, Any]], out: Path) -> Grid:
    out.mkdir(parents=True, exist_ok=True)
    settings = spec.settings()
    (out / "grid.json").write_text(json.dumps({"settings": settings, "points": points}, indent=2))
    table = markdown_grid(points)
    text = (
        f"# reinloop fault grid\n\nSettings: {json.dumps(settings)}\n\n{table}\n\n"
        f"## Paired with reinloop\n\n{markdown_paired_grid(points)}\n\n"
        f"## What each guard buys (reinloop against its ablations)\n\n{markdown_ablation_grid(points)}\n\n"
        f"## Cost\n\n{_budget_table(points)}\n\n{costly_section_grid(points)}"
        f"## Fault model\n\n{FAULT_MODEL}\n\n## Metrics\n\n{METRICS}\n"
    )
    (out / "grid.md").write_text(text)
    chart = save_chart(lambda path: _heatmap(spec, points, path), out / Grid.CHART)
    return Grid(points, table, [out / name for name in GRID_FILES if (out / name).exists()], chart)


def markdown_grid(points: Sequence[dict[str, Any]]) -> str:
    """One row per point: each agent's success over the seeds, mean (min-max), reinloop against the best
    peer, and reinloop's tokens per successful run relative to the reference peer's, then its prompt tokens
    on the messages alone (without the tool schemas) relative to the reference's."""
    header = " | ".join(AGENTS)
    lines = [
        f"| fault / correct | {header} | reinloop - best peer "
        f"| reinloop tokens per successful run vs {REFERENCE} (prompt messages alone) |",
        "| --- |" + " ---: |" * (len(AGENTS) + 2),
    ]
    for point in points:
        cells = [_success(point["agents"][agent]) for agent in AGENTS]
        lines.append(
            f"| {point['fault_rate']:g} / {point['correct_rate']:g} | {' | '.join(cells)} | "
            f"{point['reinloop_minus_best_peer'] * 100:+.0f} pp ({point['best_peer']}) | "
            f"{point['tokens_per_success_vs_reference']:.2f}x ({point['message_tokens_vs_reference']:.2f}x) |"
        )
    return "\n".join(lines)


def markdown_paired_grid(points: Sequence[dict[str, Any]]) -> str:
    """One row per point and peer: reinloop paired with the peer over the point's runs (same task, seed and
    draws): the runs only reinloop solved, those only the peer solved, and the success difference with its
    95% interval (paired bootstrap), in percentage points."""
    lines = [
        "| fault / correct | peer | pairs | only reinloop solved | only the peer solved | reinloop - peer "
        "| 95% interval |",
        "| --- | --- |" + " ---: |" * 5,
    ]
    for point in points:
        for peer, row in point["paired"].items():
            if peer not in PEERS:
                continue
            lines.append(
                f"| {point['fault_rate']:g} / {point['correct_rate']:g} | {peer} | {row['pairs']:.0f} | "
                f"{row['wins']:.0f} | {row['losses']:.0f} | {row['difference'] * 100:+.1f} pp | "
                f"{row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} pp |"
            )
    return "\n".join(lines)


def markdown_ablation_grid(points: Sequence[dict[str, Any]]) -> str:
    """One row per point and ablation: full reinloop minus the ablation, paired over the point's runs, in
    success and in tokens per run, each with its 95% interval."""
    rows = [
        ((f"{point['fault_rate']:g} / {point['correct_rate']:g}", agent), point["paired"][agent],
         point["paired_tokens"][agent])
        for point in points
        for agent in ABLATIONS
    ]  # fmt: skip
    return markdown_ablations(rows, columns=("fault / correct", "ablation"))


def _success(row: dict[str, float]) -> str:
    return f"{row['success_rate']:.0%} ({row['success_min'] * 100:.0f}-{row['success_max'] * 100:.0f})"


def _budget_table(points: Sequence[dict[str, Any]]) -> str:
    """One row per point and agent: the cost side, summed over the seeds; tokens per successful run first."""
    lines = [
        "| fault / correct | agent | runs | tokens per successful run | mean iterations | model calls "
        "| prompt tokens | completion tokens | of which tool schemas | wasted tool calls | runs over budget "
        "| crashes |",
        "| --- | --- |" + " ---: |" * 10,
    ]
    for point in points:
        for agent, row in point["agents"].items():
            lines.append(
                f"| {point['fault_rate']:g} / {point['correct_rate']:g} | {agent} | {row['runs']:.0f} | "
                f"{row['tokens_per_success']:,.0f} | {row['mean_iterations']:.1f} | {row['model_calls']:.0f} | "
                f"{row['prompt_tokens']:,.0f} | {row['completion_tokens']:,.0f} | {row['tool_schema_tokens']:,.0f} | "
                f"{row['wasted_tool_calls']:.0f} | {row['over_budget_runs']:.0f} | {row['crashes']:.0f} |"
            )
    return "\n".join(lines)


def _heatmap(spec: GridSpec, points: Sequence[dict[str, Any]], path: Path) -> None:
    from matplotlib.colors import TwoSlopeNorm

    plt = pyplot()
    rows, columns = len(spec.fault_rates), len(spec.correct_rates)
    lead = [[0.0] * columns for _ in range(rows)]
    ratio = [[0.0] * columns for _ in range(rows)]
    for number, point in enumerate(points):
        lead[number // columns][number % columns] = point["reinloop_minus_best_peer"] * 100
        ratio[number // columns][number % columns] = point["tokens_per_success_vs_reference"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 1.2 * rows + 2.6))
    span = max(5.0, *(abs(value) for row in lead for value in row))
    spread = max(0.25, *(abs(value - 1) for row in ratio for value in row))
    panels = (
        (left, lead, TwoSlopeNorm(0.0, -span, span), "RdYlGn", "{:+.0f} pp", "reinloop success - best peer's"),
        (right, ratio, TwoSlopeNorm(1.0, 1 - spread, 1 + spread), "RdYlGn_r", "{:.2f}x",
         "reinloop tokens per success / fair peer's"),
    )  # fmt: skip
    for axes, values, norm, colours, label, title in panels:
        image = axes.imshow(values, cmap=colours, norm=norm, aspect="auto")
        for row in range(rows):
            for column in range(columns):
                axes.text(column, row, label.format(values[row][column]), ha="center", va="center")
        axes.set_xticks(range(columns), [f"{rate:g}" for rate in spec.correct_rates])
        axes.set_yticks(range(rows), [f"{rate:g}" for rate in spec.fault_rates])
        axes.set_xlabel("correct rate")
        axes.set_ylabel("fault rate")
        axes.set_title(title)
        figure.colorbar(image, ax=axes)
    figure.suptitle(f"{spec.tasks} tasks, seeds {', '.join(map(str, spec.seeds))}: mean over the seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
