"""The costly faults' measures (`FaultProfile.costly`): harmful executions, and what a hopeless task costs
before the stop, per agent and paired with reinloop; their markdown for report.md and grid.md (empty for runs
without the costly faults)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from reinloop_eval.faults import COSTLY_FAULT_MODEL, COSTLY_FAULTS
from reinloop_eval.report import BASELINE, paired, run_decisions, run_tokens
from reinloop_eval.tasks import COSTLY_TASKS

if TYPE_CHECKING:
    from reinloop_eval.run import RunRecord

__all__ = [
    "COSTLY_METRICS",
    "costly_measures",
    "costly_section",
    "costly_section_grid",
    "markdown_costly",
    "paired_difference",
    "seed_spread",
]

# The tasks on which a harmful execution can happen: those that call a non-idempotent tool. Harm is paired over
# their runs only, the design's fixed part (pairing over every run would resample how many of them there are).
RISKY_TASKS = frozenset(
    task.id for task in COSTLY_TASKS if any(step.tool in COSTLY_FAULTS.non_idempotent_tools for step in task.plan)
)

COSTLY_METRICS = """\
Harmful executions: payments `send_payment` made that the task did not ask for (its payment made again, a
payment with another payee or amount, a mistyped value sent on), summed over the runs; paired with reinloop
over the runs of the tasks that call a non-idempotent tool (the same task and seed), as reinloop's total minus
the other's, with a 95% interval from the paired bootstrap (the interval of the mean difference, times the
pairs). Hopeless tasks: typed stops are the runs the agent ended itself with a finish that says why (not an
answer, not a reply create_agent could not read, not the evaluation's cap, not a crash: the task's success);
decisions, tokens and tool runs per hopeless run are the mean over those runs of the decisions (model calls to
decide), of every model call's prompt and completion tokens and of the tools' runs (in-place retries included:
the load on a service that is down), until the run ended however it ended; paired with reinloop as reinloop's
mean minus the other's, with a 95% interval. Runaways: the runs whose draw makes the model run away once it
knows the answer (the same runs for every agent, whether or not its run got that far); tool runs and tokens per
runaway run are their means, paired alike."""


def costly_measures(records: Sequence[RunRecord], baseline: str = BASELINE) -> dict[str, dict[str, Any]]:
    """Per agent: harmful executions (total) and hopeless runs (count, typed stops, mean decisions and tokens);
    for every agent but `baseline`, each paired with it (`paired`). Empty without costly runs."""
    if not any(record.hopeless for record in records):
        return {}
    risky = [record for record in records if record.task in RISKY_TASKS]
    hopeless = [record for record in records if record.hopeless]
    runaway = [record for record in records if record.runaway]
    table: dict[str, dict[str, Any]] = {}
    for agent in dict.fromkeys(record.agent for record in records):
        runs = [record for record in hopeless if record.agent == agent]
        mine = [record for record in records if record.agent == agent]
        runaways = [record for record in runaway if record.agent == agent]
        row: dict[str, Any] = {
            "harmful_executions": sum(r.harmful_executions for r in mine),
            "hopeless_runs": len(runs),
            "typed_stops": sum(r.success for r in runs),
            "hopeless_decisions": statistics.mean(r.decisions for r in runs) if runs else 0.0,
            "hopeless_tokens": statistics.mean(run_tokens(r) for r in runs) if runs else 0.0,
            "hopeless_tool_runs": statistics.mean(r.tool_calls for r in runs) if runs else 0.0,
            "runaway_runs": len(runaways),
            "runaway_tool_runs": statistics.mean(r.tool_calls for r in runaways) if runaways else 0.0,
            "runaway_tokens": statistics.mean(run_tokens(r) for r in runaways) if runaways else 0.0,
            # the spread across seeds: (lowest, highest) of the seeds' totals and means
            "harmful_seeds": _spread(mine, lambda group: sum(r.harmful_executions for r in group)),
            "hopeless_tokens_seeds": _spread(runs, lambda group: statistics.mean(map(run_tokens, group))),
        }
        if agent != baseline and any(r.agent == baseline for r in records):
            row["paired_harmful"] = _total(paired(risky, agent, baseline, _harmful))
            row["paired_hopeless_decisions"] = paired(hopeless, agent, baseline, run_decisions)
            row["paired_hopeless_tokens"] = paired(hopeless, agent, baseline, run_tokens)
            row["paired_hopeless_tool_runs"] = paired(hopeless, agent, baseline, _tool_runs)
            row["paired_runaway_tool_runs"] = paired(runaway, agent, baseline, _tool_runs) if runaway else None
            row["paired_runaway_tokens"] = paired(runaway, agent, baseline, run_tokens) if runaway else None
        table[agent] = row
    return table


def _spread(records: Sequence[RunRecord], value: Callable[[list[RunRecord]], float]) -> tuple[float, float]:
    """The lowest and highest `value` of `records` grouped by seed ((0, 0) without records)."""
    seeds = {record.seed for record in records}
    values = [value([record for record in records if record.seed == seed]) for seed in seeds] or [0.0]
    return min(values), max(values)


def _harmful(record: RunRecord) -> float:
    return float(record.harmful_executions)


def _tool_runs(record: RunRecord) -> float:
    return float(record.tool_calls)


def _total(pairing: dict[str, float]) -> dict[str, float]:
    """A paired mean difference as a difference of totals over the pairs (the interval scaled alike)."""
    pairs = pairing["pairs"]
    return {**pairing, **{key: pairing[key] * pairs for key in ("difference", "low", "high")}}


def markdown_costly(measures: dict[str, dict[str, Any]], cells: Sequence[str] = (), columns: Sequence[str] = ()) -> str:
    """One row per agent of `measures` (after the `cells` of `columns`, as a grid point's): harmful executions,
    hopeless runs' typed stops, decisions, tokens and tool runs, and each paired with reinloop (reinloop minus the
    agent, 95% interval); over several seeds, the harmful executions and the tokens per hopeless run are followed by
    their spread across the seeds (the lowest and highest seed's); the header only when `measures` is empty."""
    lines = [
        f"| {''.join(f'{column} | ' for column in columns)}agent | harmful executions | reinloop - agent "
        "| hopeless runs | typed stops | decisions per hopeless run | reinloop - agent "
        "| tokens per hopeless run | reinloop - agent | tool runs per hopeless run | reinloop - agent "
        "| runaway runs | tool runs per runaway run | reinloop - agent | tokens per runaway run | reinloop - agent |",
        "|" + " --- |" * (len(columns) + 1) + " ---: |" * 15,
    ]
    prefix = "".join(f"{cell} | " for cell in cells)
    for agent, row in measures.items():

        def vs(key: str, form: str, row: dict[str, Any] = row) -> str:
            return paired_difference(row.get(f"paired_{key}"), form)

        lines.append(
            f"| {prefix}{agent} | {row['harmful_executions']}{seed_spread(row['harmful_seeds'], '{:.0f}')} | "
            f"{vs('harmful', '{:+.0f}')} | {row['hopeless_runs']} | {row['typed_stops']} | "
            f"{row['hopeless_decisions']:.1f} | {vs('hopeless_decisions', '{:+.1f}')} | "
            f"{row['hopeless_tokens']:,.0f}{seed_spread(row['hopeless_tokens_seeds'], '{:,.0f}')} | "
            f"{vs('hopeless_tokens', '{:+,.0f}')} | {row['hopeless_tool_runs']:.1f} | "
            f"{vs('hopeless_tool_runs', '{:+.1f}')} | {row['runaway_runs']} | "
            f"{row['runaway_tool_runs']:.1f} | {vs('runaway_tool_runs', '{:+.1f}')} | "
            f"{row['runaway_tokens']:,.0f} | {vs('runaway_tokens', '{:+,.0f}')} |"
        )
    return "\n".join(lines)


def seed_spread(spread: Sequence[float], form: str = "{:.0f}") -> str:
    """` (lowest-highest)` across the seeds, or nothing when they are one value (one seed)."""
    low, high = spread
    return "" if low == high else f" ({form.format(low)}-{form.format(high)})"


def paired_difference(pairing: dict[str, float] | None, form: str, scale: float = 1.0) -> str:
    """A `paired` difference as "difference (low to high)", each value times `scale` in `form`; nothing without
    a pairing."""
    if not pairing:
        return ""
    low, difference, high = (form.format(pairing[key] * scale) for key in ("low", "difference", "high"))
    return f"{difference} ({low} to {high})"


def costly_section(measures: dict[str, dict[str, Any]]) -> str:
    """report.md's section on the costly faults (`costly_measures`), with a blank line after it: empty without
    them."""
    if not measures:
        return ""
    return f"## Costly faults\n\n{markdown_costly(measures)}\n\n{COSTLY_FAULT_MODEL}\n\n{COSTLY_METRICS}\n\n"


def costly_section_grid(points: Sequence[dict[str, Any]]) -> str:
    """grid.md's section on the costly faults (each point's `costly` measures), with a blank line after it:
    empty without them."""
    rows = [point for point in points if point.get("costly")]
    if not rows:
        return ""
    column = ("fault / correct",)
    tables = [
        markdown_costly(point["costly"], (f"{point['fault_rate']:g} / {point['correct_rate']:g}",), column)
        for point in rows
    ]
    body = "\n".join([tables[0], *("\n".join(table.splitlines()[2:]) for table in tables[1:])])
    return f"## Costly faults\n\n{body}\n\n{COSTLY_FAULT_MODEL}\n\n{COSTLY_METRICS}\n\n"
