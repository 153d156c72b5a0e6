"""The benchmark as one call (what `reinloop eval` runs): pick the model and the agents, run the suite, write
the report."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from reinloop_eval.costly_report import costly_measures, markdown_costly
from reinloop_eval.run import (
    AGENTS,
    PRESET_AGENTS,
    REPORTING_SEEDS,
    evaluate_suite,
    markdown_paired,
    markdown_table,
    paired_all,
    write_report,
)
from reinloop_eval.simulated import FaultProfile
from reinloop_eval.tasks import tasks_for

__all__ = ["REPORT_FILES", "Benchmark", "run_benchmark"]

REPORT_FILES = ("report.md", "report.json", "report.png")


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark wrote: the summary per agent, as a markdown table too, and the report files."""

    CHART: ClassVar[str] = "report.png"

    summary: dict[str, dict[str, float]]
    table: str
    files: list[Path] = field(default_factory=list)
    chart: bool = False  # report.png needs the eval extra's matplotlib


def run_benchmark(
    profile: FaultProfile,
    *,
    seed: int = REPORTING_SEEDS[0],
    tasks: int,
    out: Path,
    model: str | None = None,
    base_url: str | None = None,
    local: bool = False,
    protocol: str | None = None,
    presets: bool = False,
    progress: Callable[[int, int, str, str], None] | None = None,
) -> Benchmark:
    """The suite's first `tasks` tasks with the simulated model and `profile`'s faults, or, given `model`,
    `base_url` or `local`, with that real model (in `protocol`, else the model's default one) and no injected
    faults; the report is written to `out`. `presets`: the seed presets too, as rows beside the five agents
    (simulated model only).

    `progress(done, total, agent, task)` is called after each run.
    """
    with ExitStack() as stack:
        real = None
        agents: tuple[str, ...] = AGENTS + (PRESET_AGENTS if presets else ())
        if model or base_url or local:
            from reinloop.models import LOCAL, model_from_settings

            real = stack.enter_context(model_from_settings(LOCAL if local else model, base_url, protocol))
            profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=1.0)
            # The presets write their own protocols; the others meet a text protocol's model through
            # native calls read from its text (`WrittenToolCalls`).
            agents = AGENTS
        total, done = len(tasks_for(profile, tasks)) * len(agents), 0

        def advance(agent: str, task: str) -> None:
            nonlocal done
            done += 1
            if progress:
                progress(done, total, agent, task)

        records = evaluate_suite(profile=profile, seed=seed, tasks=tasks, agents=agents, progress=advance, real=real)
    summary = write_report(records, profile, seed, out)
    files = [out / name for name in REPORT_FILES if (out / name).exists()]
    comparisons = paired_all(records)
    table = markdown_table(summary) + (f"\n\n{markdown_paired(comparisons)}" if comparisons else "")
    if costly := costly_measures(records):
        table += f"\n\n{markdown_costly(costly)}"
    return Benchmark(summary, table, files, chart=(out / Benchmark.CHART).exists())
