"""The BFCL report: accuracy per category per agent with a 95% Wilson interval, tokens and decisions per task,
reinloop paired with each other agent (the evaluation's paired bootstrap), as bfcl.md and bfcl.json."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reinloop_eval.bfcl.run import BfclRecord
from reinloop_eval.report import BASELINE, paired

__all__ = ["ALL", "markdown_bfcl", "summarize_bfcl", "wilson", "write_bfcl_report"]

ALL = "all"  # the row of every category together
Z_95 = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson(successes: int, runs: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default); (0, 1) with no runs."""
    if runs == 0:
        return 0.0, 1.0
    rate = successes / runs
    centre = (rate + z * z / (2 * runs)) / (1 + z * z / runs)
    half = z * math.sqrt(rate * (1 - rate) / runs + z * z / (4 * runs * runs)) / (1 + z * z / runs)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize_bfcl(records: Sequence[BfclRecord]) -> dict[str, dict[str, dict[str, float]]]:
    """Per category (and all of them together, `ALL`), per agent: runs, successes, accuracy and its interval,
    mean tokens, decisions and executed calls per task, crashes; and reinloop's paired difference with it."""
    categories = [*dict.fromkeys(record.category for record in records), ALL]
    table: dict[str, dict[str, dict[str, float]]] = {}
    for category in categories:
        chosen = [r for r in records if category in (ALL, r.category)]
        table[category] = {agent: _row(chosen, agent) for agent in dict.fromkeys(r.agent for r in chosen)}
    return table


def _row(records: Sequence[BfclRecord], agent: str) -> dict[str, float]:
    runs = [record for record in records if record.agent == agent]
    successes = sum(record.success for record in runs)
    low, high = wilson(successes, len(runs))
    row = {
        "runs": len(runs),
        "successes": successes,
        "accuracy": successes / len(runs),
        "low": low,
        "high": high,
        "tokens_per_task": statistics.mean(r.prompt_tokens + r.completion_tokens for r in runs),
        "decisions_per_task": statistics.mean(r.decisions for r in runs),
        "calls_per_task": statistics.mean(r.tool_calls for r in runs),
        "crashes": sum(r.crashed for r in runs),
    }
    if agent != BASELINE:
        comparison = paired(records, agent)  # type: ignore[arg-type]  # the same fields as a RunRecord's
        row.update({f"vs_{key}": value for key, value in comparison.items()})
    return row


def markdown_bfcl(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    """One table per category: accuracy with its interval, cost per task, and reinloop's paired difference."""
    sections = []
    for category, rows in summary.items():
        lines = [
            f"### {category}",
            "",
            "| agent | runs | accuracy | 95% interval (Wilson) | tokens per task | decisions per task "
            f"| calls per task | crashes | {BASELINE} minus it (paired bootstrap) |",
            "| --- |" + " ---: |" * 8,
        ]
        for agent, row in rows.items():
            difference = (
                f"{row['vs_difference'] * 100:+.1f} pp ({row['vs_low'] * 100:+.1f} to {row['vs_high'] * 100:+.1f})"
                if "vs_difference" in row
                else ""
            )
            lines.append(
                f"| {agent} | {row['runs']:.0f} | {row['accuracy']:.1%} | {row['low']:.1%} to {row['high']:.1%} "
                f"| {row['tokens_per_task']:,.0f} | {row['decisions_per_task']:.1f} | {row['calls_per_task']:.1f} "
                f"| {row['crashes']:.0f} | {difference} |"
            )
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def write_bfcl_report(records: Sequence[BfclRecord], settings: dict[str, Any], out: Path) -> str:
    """bfcl.md and bfcl.json in `out` (the settings, the summary, every run with the calls scored); returns the
    markdown tables."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize_bfcl(records)
    tables = markdown_bfcl(summary)
    data = {"settings": settings, "summary": summary, "runs": [asdict(record) for record in records]}
    (out / "bfcl.json").write_text(json.dumps(data, indent=2, default=str))
    (out / "bfcl.md").write_text(f"# BFCL\n\nSettings: {json.dumps(settings)}\n\n{tables}\n")
    return tables
