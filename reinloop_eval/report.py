"""The report of a suite run: the summary per agent, each agent paired with reinloop (a seeded paired
bootstrap), the markdown tables, and report.md, report.json and report.png with the metrics they define
(`METRICS`); the chart helpers the grid draws with too."""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reinloop_eval.agents import ABLATIONS, BUDGET, HARD_CAP
from reinloop_eval.faults import FAULT_MODEL, FaultProfile

if TYPE_CHECKING:
    from reinloop_eval.run import RunRecord

__all__ = [
    "BASELINE",
    "METRICS",
    "markdown_ablations",
    "markdown_paired",
    "markdown_table",
    "paired",
    "paired_all",
    "pyplot",
    "run_decisions",
    "run_tokens",
    "save_chart",
    "summarize_runs",
    "tokens_per_success",
    "write_report",
]

# The paired comparison: resamples of the bootstrap, and its generator's seed (a fixed one: the same records
# give the same interval every time).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

METRICS = f"""\
Success: the task's check holds (the answer holds the expected value, and/or the file or the database row
exists). Paired with reinloop: every agent meets the same draws on a task at a seed, so each run of an agent
is paired with reinloop's run on the same task and seed; the runs only reinloop solved, those only the other
solved, and reinloop's success minus the other's with a 95% interval from a paired bootstrap
({BOOTSTRAP_RESAMPLES} resamples of the pairs, seeded). Tokens per successful run (the headline cost): the
prompt and completion tokens of every model call the runs caused (decisions, a decision asked for again,
summaries, the translate tool's calls), over the successful runs. Iterations: the agent's decisions (its
model calls, without those of the translate tool and the summarizers; a decision asked for again counts).
Model calls: every model call. Runs over budget: runs that took more than {BUDGET} rounds, or that the
evaluation had to stop because the agent did not (the naive loop at {HARD_CAP} decisions, create_agent at
LangGraph's recursion limit, set at {HARD_CAP} rounds); reinloop (max_iterations {BUDGET}) and create_agent
with middleware (a model call limit of {BUDGET}) stop themselves. A round is a decision the agent acts on:
for reinloop one of its iterations, for the others a model step; a reply of malformed calls asked for again
within it (reinloop's parse retry, the re-asking middleware) is a decision and a model call but not a
round, for both alike. Wasted tool calls: tool executions that did not serve the task, all executions but
the successful ones counted up to the number of steps in the task's reference plan (so a failed call, a
retry, a repeat, any call beyond the plan counts; a call refused before it runs does not). Prompt tokens:
what the model calls were sent, counted with tiktoken as a provider bills them: the messages (a malformed
call's name and arguments included), and the schemas of the tools bound for native tool calls (each counted
as its JSON, as reinloop's token budget counts them), which every such call sends again; for a preset whose
protocol writes text (json, react, call_tool) the tool list is in its system prompt instead. Completion
tokens: what the calls wrote (text, calls, malformed calls). Tool schema tokens: the schemas' part of the
prompt tokens. Cache read and cache write tokens (report.json): the part of the prompt tokens a real model's
provider reports it read from or wrote to its prompt cache (0 for the simulated model, which has none); they
count whole in every other figure. Simulated time: the model's latency, the timer's waits and the slow calls'
hangs as each agent waited them (to its tool timeout, or to the end), in simulated seconds; no figure depends on real
time."""


def summarize_runs(records: Sequence[RunRecord]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for agent in dict.fromkeys(record.agent for record in records):
        runs = [record for record in records if record.agent == agent]
        successes = sum(r.success for r in runs)
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in runs)
        table[agent] = {
            "runs": len(runs),
            "successes": successes,
            "success_rate": successes / len(runs),
            "tokens_per_success": tokens_per_success(tokens, successes),
            "mean_iterations": statistics.mean(r.decisions for r in runs),
            "model_calls": sum(r.model_calls for r in runs),
            "prompt_tokens": sum(r.prompt_tokens for r in runs),
            "completion_tokens": sum(r.completion_tokens for r in runs),
            "tool_schema_tokens": sum(r.tool_schema_tokens for r in runs),
            "cache_read_tokens": sum(r.cache_read_tokens for r in runs),
            "cache_write_tokens": sum(r.cache_write_tokens for r in runs),
            "wasted_tool_calls": sum(r.wasted_tool_calls for r in runs),
            "over_budget_runs": sum(r.exceeded_budget for r in runs),
            "crashes": sum(r.crashed for r in runs),
            "sim_s": round(sum(r.sim_s for r in runs), 3),
        }
    return table


BASELINE = "reinloop"  # whom every other agent is paired with


def solved(record: RunRecord) -> float:
    return float(record.success)


def run_tokens(record: RunRecord) -> float:
    """A run's tokens: prompt and completion, every model call it caused."""
    return float(record.prompt_tokens + record.completion_tokens)


def run_decisions(record: RunRecord) -> float:
    """A run's decisions: the model calls of its agent's loop, re-asks included."""
    return float(record.decisions)


def paired(
    records: Sequence[RunRecord],
    agent: str,
    baseline: str = BASELINE,
    measure: Callable[[RunRecord], float] = solved,
) -> dict[str, float]:
    """`baseline` against `agent` on the runs they share (same task and seed, hence the same draws): the runs
    only the baseline solved (`wins`), only the agent solved (`losses`), the baseline's success minus the
    agent's, and a 95% interval for that difference from a paired bootstrap over the shared runs (resampled
    as pairs, so the faults both met stay matched). Another `measure` of a run (`run_tokens`): the pairs where
    the baseline's is higher (`wins`) and lower (`losses`), and the mean difference with its interval."""
    values = {(r.agent, r.task, r.seed): measure(r) for r in records}
    keys = [(task, seed) for name, task, seed in values if name == baseline and (agent, task, seed) in values]
    diffs = [values[(baseline, *key)] - values[(agent, *key)] for key in keys]
    n = len(diffs)
    if n == 0:
        return {"pairs": 0, "wins": 0, "losses": 0, "difference": 0.0, "low": 0.0, "high": 0.0}
    rng = random.Random(BOOTSTRAP_SEED)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    return {
        "pairs": n,
        "wins": sum(diff > 0 for diff in diffs),
        "losses": sum(diff < 0 for diff in diffs),
        "difference": sum(diffs) / n,
        "low": means[int(0.025 * BOOTSTRAP_RESAMPLES)],
        "high": means[int(0.975 * BOOTSTRAP_RESAMPLES) - 1],
    }


def paired_all(
    records: Sequence[RunRecord], baseline: str = BASELINE, measure: Callable[[RunRecord], float] = solved
) -> dict[str, dict[str, float]]:
    """`paired` for every agent of `records` but the baseline (none if it did not run)."""
    agents = dict.fromkeys(record.agent for record in records)
    if baseline not in agents:
        return {}
    return {agent: paired(records, agent, baseline, measure) for agent in agents if agent != baseline}


def markdown_ablations(
    rows: Sequence[tuple[Sequence[str], dict[str, float], dict[str, float]]], columns: Sequence[str] = ("ablation",)
) -> str:
    """One row per (cells, success pairing, tokens pairing) of an ablation with reinloop, its first `columns`
    being `cells`: what the guard or feature taken out buys, full reinloop minus the ablation, in success
    (percentage points) and in tokens per run, each with its paired 95% interval."""
    lines = [
        f"| {' | '.join(columns)} | pairs | only reinloop solved | only the ablation solved "
        "| success, reinloop - ablation | tokens per run, reinloop - ablation |",
        "|" + " --- |" * len(columns) + " ---: |" * 5,
    ]
    for cells, success, tokens in rows:
        lines.append(
            f"| {' | '.join(cells)} | {success['pairs']:.0f} | {success['wins']:.0f} | {success['losses']:.0f} | "
            f"{success['difference'] * 100:+.1f} pp ({success['low'] * 100:+.1f} to {success['high'] * 100:+.1f}) | "
            f"{tokens['difference']:+,.0f} ({tokens['low']:+,.0f} to {tokens['high']:+,.0f}) |"
        )
    return "\n".join(lines)


def markdown_paired(comparisons: dict[str, dict[str, float]], baseline: str = BASELINE) -> str:
    """One row per agent: the runs only the baseline solved, those only the agent solved, and the success
    difference with its 95% interval, in percentage points."""
    lines = [
        f"| {baseline} vs | pairs | only {baseline} solved | only the other solved "
        "| success difference | 95% interval (paired bootstrap) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for agent, row in comparisons.items():
        lines.append(
            f"| {agent} | {row['pairs']:.0f} | {row['wins']:.0f} | {row['losses']:.0f} | "
            f"{row['difference'] * 100:+.1f} pp | {row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} pp |"
        )
    return "\n".join(lines)


def tokens_per_success(tokens: float, successes: float) -> float:
    """The headline cost: all tokens of all runs (prompt and completion, every model call) per successful run;
    with no success, all the tokens (as if one run had succeeded)."""
    return round(tokens / max(1, successes), 1)


def markdown_table(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        "| agent | success | tokens per successful run | mean iterations | model calls | prompt tokens "
        "| completion tokens | of which tool schemas | wasted tool calls | runs over budget | crashes "
        "| simulated time (s) |",
        "| --- |" + " ---: |" * 11,
    ]
    for agent, row in summary.items():
        lines.append(
            f"| {agent} | {row['success_rate']:.0%} | {row['tokens_per_success']:,.0f} | "
            f"{row['mean_iterations']:.1f} | {row['model_calls']} | {row['prompt_tokens']:,} | "
            f"{row['completion_tokens']:,} | {row['tool_schema_tokens']:,} | {row['wasted_tool_calls']} | "
            f"{row['over_budget_runs']} | {row['crashes']} | {row['sim_s']:.1f} |"
        )
    return "\n".join(lines)


def write_report(records: Sequence[RunRecord], profile: FaultProfile, seed: int, out: Path) -> dict[str, Any]:
    """report.md, report.json and (with the eval extra's matplotlib) report.png in `out`; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize_runs(records)
    comparisons = paired_all(records)
    tokens = paired_all(records, measure=run_tokens)
    from reinloop_eval.costly_report import costly_measures, costly_section  # it pairs with `paired`, from here

    costly = costly_measures(records)  # empty without the costly faults
    settings = {"seed": seed, "tasks": len({r.task for r in records}), "budget": BUDGET, **asdict(profile)}
    data = {"settings": settings, "summary": summary, "paired": comparisons, "paired_tokens": tokens,
            "costly": costly, "runs": [asdict(r) for r in records]}  # fmt: skip
    (out / "report.json").write_text(json.dumps(data, indent=2))
    ablations = [((agent,), comparisons[agent], tokens[agent]) for agent in ABLATIONS if agent in comparisons]
    text = (
        f"# reinloop evaluation\n\nSettings: {json.dumps(settings)}\n\n{markdown_table(summary)}\n\n"
        f"## Paired with reinloop\n\n{markdown_paired(comparisons)}\n\n"
        f"## What each guard buys (reinloop against its ablations)\n\n{markdown_ablations(ablations)}\n\n"
        f"{costly_section(costly)}## Fault model\n\n{FAULT_MODEL}\n\n## Metrics\n\n{METRICS}\n"
    )
    (out / "report.md").write_text(text)
    save_chart(lambda path: _chart(summary, path), out / "report.png")
    return summary


def save_chart(draw: Callable[[Path], None], path: Path) -> bool:
    """`draw(path)`, and whether it could: a chart needs the eval extra's matplotlib, a table does not."""
    try:
        draw(path)
    except ImportError:
        path.unlink(missing_ok=True)
        return False
    return True


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _chart(summary: dict[str, dict[str, float]], path: Path) -> None:
    plt = pyplot()
    agents = list(summary)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.bar(agents, [summary[a]["success_rate"] * 100 for a in agents], color="tab:green")
    left.set_ylabel("success rate (%)")
    left.set_ylim(0, 100)
    right.bar(agents, [summary[a]["mean_iterations"] for a in agents], color="tab:blue")
    right.axhline(BUDGET, color="tab:red", linestyle="--", label=f"budget ({BUDGET})")
    right.set_ylabel("mean iterations")
    right.legend()
    for axes in (left, right):
        axes.tick_params(axis="x", labelrotation=15)
    figure.suptitle("Same tasks, seeds, tools and faults for each agent")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
