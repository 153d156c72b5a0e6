"""Regenerates docs/evaluation.md: the fault grids on the reporting seeds, and the real-model benchmark.

    .venv/bin/python benchmarks/evaluation_page.py --workers 2 --real-model benchmarks/results/real-model

Runs up to four grids (six points each: fault rates 0.1 0.3 0.5 x correct rates 0.3 0.7, seeds 100-102, 50
tasks, every agent and ablation): the default profile and the loops profile (runaway and stubborn loops at 0.2),
each with the five faults that have their own rates at `reinloop eval`'s 0.02 and with them off (`--profiles`
picks some). `--real-model DIR` adds the tables `benchmarks/real_model.py` wrote to DIR. The default profile
took 18 minutes with two workers on a shared 2-core machine (12 agents).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from reinloop_eval import FaultProfile, GridSpec, run_grid
from reinloop_eval.agents import ABLATIONS, FAIR_PEER
from reinloop_eval.grid import REFERENCE, markdown_ablation_grid, markdown_grid, markdown_paired_grid
from reinloop_eval.simulated import EXTRA_FAULT_RATE, EXTRA_FAULTS, FAULT_MODEL

PAGE = Path(__file__).resolve().parent.parent / "docs" / "evaluation.md"
LOOPS = {"runaway_rate": 0.2, "stubborn_rate": 0.2}
EXTRA_ON = {f"{fault}_rate": EXTRA_FAULT_RATE for fault in EXTRA_FAULTS}
LOOP_FLAGS = " --runaway-rate 0.2 --stubborn-rate 0.2"
PROFILES: dict[str, tuple[str, dict[str, Any], str]] = {
    "default": ("the default profile", {**EXTRA_ON}, ""),
    "loops": ("the loops profile", {**LOOPS, **EXTRA_ON}, LOOP_FLAGS),
    "default-classic": ("the default profile without the five newer faults", {}, " --no-extra"),
    "loops-classic": ("the loops profile without the five newer faults", {**LOOPS}, LOOP_FLAGS + " --no-extra"),
}
READING = f"""\
The peers: the naive loop, create_agent alone, with LangChain's middleware (call limits, tool retry,
summarization), with the re-asking middleware, and `{FAIR_PEER}`, the fair best peer and the bar: the re-asking
stack with the recovery of every unreadable reply a careful LangChain user would write (a call written as JSON
text run as the native call; an empty reply or a malformed call asked again with what was wrong; reinloop's
parse-retry budget). Each "reinloop -X" row is reinloop with X taken out: each guard that acts during a run
(dead_loop, error_streak, tool_circuit, max_tool_attempts), the four together ("all guards", token_budget too,
which never acts here: no run_token_budget is set), and its parse retries (max_parse_retries=0); every ablation
keeps max_iterations at 20, the budget every agent has.

How to read the ablations: in these profiles every task can be done, and after a failure the model fixes it with
a set chance at each decision (`correct_rate`, halved when the feedback does not name the mistake), so a run that
goes on long enough is usually solved. A guard that stops a run early therefore shows here as lost success and
saved tokens; what a stop is worth when going on is futile or harmful (hopeless tasks, repeated payments) is what
the costly faults measure (`reinloop eval --costly`)."""
REAL_MODEL, FAULT_MODEL_HEADING = "## A real model: the embedded Gemma 3 270M", "## The fault model"


def _heading(title: str) -> str:
    return f"## {title[0].upper()}{title[1:]}"


# The sections this script writes; the page's others are kept as they are (`kept_sections`).
OWN_TITLES = frozenset({*(_heading(title) for title, _, _ in PROFILES.values()), REAL_MODEL, FAULT_MODEL_HEADING})
NO_EXTRA = " ".join(f"--{fault.replace('_', '-')}-rate 0" for fault in EXTRA_FAULTS)


def headline(points: list[dict[str, Any]]) -> str:
    """Per point: reinloop and the reference peer (the fair one), paired, and the cost per success."""
    lines = [
        f"| fault / correct | reinloop | {REFERENCE} | only reinloop solved | only the peer solved "
        "| difference (95% interval) | tokens per successful run, reinloop / peer |",
        "| --- |" + " ---: |" * 6,
    ]
    for point in points:
        mine, peer, pair = point["agents"]["reinloop"], point["agents"][REFERENCE], point["paired"][REFERENCE]
        lines.append(
            f"| {point['fault_rate']:g} / {point['correct_rate']:g} | {mine['success_rate']:.1%} | "
            f"{peer['success_rate']:.1%} | {pair['wins']:.0f} | {pair['losses']:.0f} | "
            f"{pair['difference'] * 100:+.1f} pp ({pair['low'] * 100:+.1f} to {pair['high'] * 100:+.1f}) | "
            f"{mine['tokens_per_success']:,.0f} / {peer['tokens_per_success']:,.0f} "
            f"({point['tokens_per_success_vs_reference']:.2f}x) |"
        )
    return "\n".join(lines)


def _where(points: list[dict[str, Any]], table: str, agent: str, holds: Callable[[dict[str, float]], bool]) -> str:
    """The points at which `agent`'s pairing with reinloop in `table` ("paired", "paired_tokens") `holds`."""
    names = [f"{point['fault_rate']:g} / {point['correct_rate']:g}" for point in points if holds(point[table][agent])]
    return ", ".join(names) if names else "none"


def _above(row: dict[str, float]) -> bool:
    return row["low"] > 0


def _below(row: dict[str, float]) -> bool:
    return row["high"] < 0


def _level(row: dict[str, float]) -> bool:
    return row["low"] <= 0 <= row["high"]


def verdicts(points: list[dict[str, Any]]) -> str:
    """In words, from the figures: where reinloop's success is above the fair peer's (the paired interval above
    zero), level with it, or below it; then, per ablation, where the guard or feature taken out changed success
    or tokens per run (an interval that excludes zero), and in which direction."""
    lines = [
        f"- reinloop against {REFERENCE}: above at {_where(points, 'paired', REFERENCE, _above)}; below at "
        f"{_where(points, 'paired', REFERENCE, _below)}; no difference the interval can tell at "
        f"{_where(points, 'paired', REFERENCE, _level)}."
    ]
    for agent in ABLATIONS:
        success = _directions(points, "paired", agent, ("solves more", "solves fewer", "solves as many"))
        tokens = _directions(
            points, "paired_tokens", agent, ("spends more tokens per run", "spends fewer", "spends as many")
        )
        lines.append(f"- {agent.removeprefix('reinloop ')}: reinloop {success}; it {tokens}.")
    return "\n".join(lines)


def _directions(points: list[dict[str, Any]], key: str, agent: str, words: tuple[str, str, str]) -> str:
    """Where reinloop's paired difference with `agent` is above zero and where below (`words`: above, below,
    neither), or that no interval tells them apart."""
    above, below, same = words
    found = ((above, _where(points, key, agent, _above)), (below, _where(points, key, agent, _below)))
    parts = [f"{said} at {where}" for said, where in found if where != "none"]
    return ", ".join(parts) if parts else f"{same} at every point (no interval excludes zero)"


def _left_out(profiles: list[str]) -> str:
    """A line naming the profiles this page did not run, and how to run them."""
    missing = [name for name in PROFILES if name not in profiles]
    if not missing:
        return ""
    titles = "; ".join(PROFILES[name][0] for name in missing)
    return f"Not run for this page: {titles} (`--profiles {' '.join(missing)}` runs them).\n\n"


def kept_sections(old: str) -> str:
    """The sections (`## ` headings) of the page before that this script never writes, in their order: the ones
    written by hand from other benchmarks (the costly faults), kept when the page is generated again."""
    sections = re.split(r"(?m)^(?=## )", old)[1:]
    return "".join("\n" + part.rstrip("\n") + "\n" for part in sections if part.splitlines()[0] not in OWN_TITLES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("evaluation-grids"), help="where each grid's files go")
    parser.add_argument("--real-model", type=Path, help="a folder benchmarks/real_model.py wrote")
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--reuse", action="store_true", help="read a grid --out already holds instead of rerunning it")
    parser.add_argument("--profiles", nargs="+", choices=list(PROFILES), default=list(PROFILES))
    args = parser.parse_args()
    sections = []
    for name in args.profiles:
        title, rates, flags = PROFILES[name]
        saved = args.out / name / "grid.json"
        if args.reuse and saved.exists():
            points = json.loads(saved.read_text())["points"]
        else:
            started, cpu = time.perf_counter(), time.process_time()
            spec = GridSpec(base=replace(FaultProfile(), **rates))
            points = run_grid(spec, out=args.out / name, workers=args.workers).points
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            print(f"{name}: {wall:.0f} s wall, {cpu:.0f} s CPU in the parent process", flush=True)
        command = f".venv/bin/reinloop eval --grid --workers 2{flags.replace(' --no-extra', ' ' + NO_EXTRA)}"
        sections.append(
            f"{_heading(title)}\n\n```bash\n{command}\n```\n\n"
            f"Where reinloop wins, ties and loses, read from the tables below (95% paired intervals):\n\n"
            f"{verdicts(points)}\n\n"
            f"reinloop and {REFERENCE}, paired over each point's 150 runs:\n\n{headline(points)}\n\n"
            f"Every agent (success over the three seeds, mean and min-max):\n\n{markdown_grid(points)}\n\n"
            f"Every peer paired with reinloop:\n\n{markdown_paired_grid(points)}\n\n"
            f"What each guard buys: full reinloop minus reinloop without it, paired over the point's 150 runs "
            f"(success; tokens per run, where a negative difference is tokens the guard saves):\n\n"
            f"{markdown_ablation_grid(points)}\n"
        )
    real = ""
    if args.real_model is not None:
        # real-model.md begins with the command that made it; what its figures say is in benchmarks.md.
        real = (
            f"\n{REAL_MODEL}\n\nWhat these figures say: [benchmarks.md]"
            f"(benchmarks.md#a-real-model).\n\n{(args.real_model / 'real-model.md').read_text()}\n"
        )
    generated = (
        "# Evaluation figures\n\nGenerated by `.venv/bin/python benchmarks/evaluation_page.py --workers "
        f"{args.workers} --profiles {' '.join(args.profiles)}`; "
        "each section gives the command that reproduces its tables. Seeds 100-102 (the reporting seeds), 50 "
        "tasks, budget 20 rounds. The Evaluation section of [benchmarks.md]"
        "(benchmarks.md#evaluation-five-agents-under-injected-faults) explains the instrument.\n\n"
        + f"{READING}\n\n"
        + _left_out(args.profiles)
        + "\n".join(sections)
        + real
        + f"\n{FAULT_MODEL_HEADING}\n\n{FAULT_MODEL}\n"
    )
    page = generated + kept_sections(args.page.read_text() if args.page.exists() else "")
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text(page)
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
