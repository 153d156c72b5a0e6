"""The costly grid's tables as docs/evaluation.md gives them, from the `grid.json` that
``reinloop eval --costly --grid --out DIR`` writes: harmful executions, hopeless tasks, success, runaways, each
reinloop against the fair peer (and its ablations) with paired 95% intervals, and what each guard buys (the
range of reinloop minus the ablation over the points, and at how many the interval excludes zero).

Run: python benchmarks/costly_tables.py DIR
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reinloop_eval.agents import ABLATIONS, FAIR_PEER
from reinloop_eval.costly_report import paired_difference, seed_spread

Point = dict[str, Any]


def point_name(point: Point) -> str:
    return f"{point['fault_rate']:g} / {point['correct_rate']:g}"


def interval(pairing: dict[str, float] | None, form: str, scale: float = 1.0) -> str:
    return paired_difference(pairing, form, scale) or "-"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def harm(points: list[Point]) -> str:
    rows = []
    for point in points:
        ours, peer, ablation = (point["costly"][a] for a in ("reinloop", FAIR_PEER, "reinloop -dead_loop"))
        rows.append([
            point_name(point),
            f"{ours['harmful_executions']}{seed_spread(ours['harmful_seeds'])}",
            f"{peer['harmful_executions']}{seed_spread(peer['harmful_seeds'])}",
            interval(peer["paired_harmful"], "{:+.0f}"),
            f"{ablation['harmful_executions']}{seed_spread(ablation['harmful_seeds'])}",
            interval(ablation["paired_harmful"], "{:+.0f}"),
        ])  # fmt: skip
    header = ["fault / correct", "reinloop", "create_agent + recovery", "reinloop - peer (95% interval)",
              "reinloop -dead_loop", "reinloop - ablation (95% interval)"]  # fmt: skip
    return table(header, rows)


def hopeless(points: list[Point]) -> str:
    rows = []
    for point in points:
        ours, peer = point["costly"]["reinloop"], point["costly"][FAIR_PEER]
        rows.append([
            point_name(point),
            f"{ours['typed_stops']} / {peer['typed_stops']} of {ours['hopeless_runs']}",
            f"{ours['hopeless_decisions']:.1f} / {peer['hopeless_decisions']:.1f}",
            interval(peer["paired_hopeless_decisions"], "{:+.1f}"),
            f"{ours['hopeless_tokens']:,.0f}{seed_spread(ours['hopeless_tokens_seeds'], '{:,.0f}')} / "
            f"{peer['hopeless_tokens']:,.0f}{seed_spread(peer['hopeless_tokens_seeds'], '{:,.0f}')}",
            interval(peer["paired_hopeless_tokens"], "{:+,.0f}"),
            f"{ours['hopeless_tool_runs']:.1f} / {peer['hopeless_tool_runs']:.1f}",
        ])  # fmt: skip
    header = ["fault / correct", "typed stops, reinloop / peer", "decisions per run, reinloop / peer",
              "reinloop - peer", "tokens per run, reinloop / peer (seeds' range)", "reinloop - peer",
              "tool runs per run, reinloop / peer"]  # fmt: skip
    return table(header, rows)


def success(points: list[Point]) -> str:
    rows = []
    for point in points:
        ours, peer, pairing = point["agents"]["reinloop"], point["agents"][FAIR_PEER], point["paired"][FAIR_PEER]
        rows.append([
            point_name(point),
            f"{ours['success_rate']:.1%} ({ours['success_min'] * 100:.0f}-{ours['success_max'] * 100:.0f})",
            f"{peer['success_rate']:.1%} ({peer['success_min'] * 100:.0f}-{peer['success_max'] * 100:.0f})",
            f"{pairing['wins']:.0f}", f"{pairing['losses']:.0f}",
            f"{pairing['difference'] * 100:+.1f} pp ({pairing['low'] * 100:+.1f} to {pairing['high'] * 100:+.1f} pp)",
        ])  # fmt: skip
    header = ["fault / correct", "reinloop", "create_agent + recovery", "only reinloop solved",
              "only the peer solved", "reinloop - peer (95% interval)"]  # fmt: skip
    return table(header, rows)


def runaways(points: list[Point]) -> str:
    rows = []
    for point in points:
        costly = point["costly"]
        ours, peer, ablation = (costly[a] for a in ("reinloop", FAIR_PEER, "reinloop -max_tool_attempts"))
        rows.append([
            point_name(point),
            str(ours["runaway_runs"]),
            f"{ours['runaway_tool_runs']:.1f} / {peer['runaway_tool_runs']:.1f} / {ablation['runaway_tool_runs']:.1f}",
            interval(peer.get("paired_runaway_tool_runs"), "{:+.1f}"),
            interval(ablation.get("paired_runaway_tool_runs"), "{:+.1f}"),
            f"{ours['runaway_tokens']:,.0f} / {peer['runaway_tokens']:,.0f} / {ablation['runaway_tokens']:,.0f}",
            interval(peer.get("paired_runaway_tokens"), "{:+,.0f}"),
        ])  # fmt: skip
    header = ["fault / correct", "runaway runs", "tool runs per runaway run: reinloop / peer / -max_tool_attempts",
              "reinloop - peer", "reinloop - ablation", "tokens per runaway run: reinloop / peer / ablation",
              "reinloop - peer"]  # fmt: skip
    return table(header, rows)


# What each guard buys: (column, where the pairing is, its format, its scale)
MEASURES: list[tuple[str, Callable[[Point, str], dict[str, float] | None], str, float]] = [
    ("success", lambda point, agent: point["paired"][agent], "{:+.1f} pp", 100.0),
    ("harmful executions", lambda point, agent: point["costly"][agent]["paired_harmful"], "{:+.0f}", 1.0),
    ("tokens per hopeless run", lambda point, agent: point["costly"][agent]["paired_hopeless_tokens"], "{:+,.0f}", 1.0),
    ("tool runs per hopeless run", lambda point, agent: point["costly"][agent]["paired_hopeless_tool_runs"],
     "{:+.1f}", 1.0),
    ("tool runs per runaway run", lambda point, agent: point["costly"][agent].get("paired_runaway_tool_runs"),
     "{:+.1f}", 1.0),
    ("tokens per runaway run", lambda point, agent: point["costly"][agent].get("paired_runaway_tokens"),
     "{:+,.0f}", 1.0),
]  # fmt: skip


def guards(points: list[Point]) -> str:
    rows = []
    for agent in ABLATIONS:
        row = [agent.removeprefix("reinloop -")]
        for _, pairing_of, form, scale in MEASURES:
            pairings = [p for p in (pairing_of(point, agent) for point in points) if p]
            if not pairings:
                row.append("-")
                continue
            low, high = (form.format(f(p["difference"] for p in pairings) * scale) for f in (min, max))
            excludes = sum(p["low"] > 0 or p["high"] < 0 for p in pairings)
            span = low if low == high else f"{low} to {high}"
            row.append(f"{span} ({excludes} of {len(pairings)})")
        rows.append(row)
    return table(["guard taken out", *(name for name, *_ in MEASURES)], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="the folder of a costly grid (its grid.json)")
    args = parser.parse_args()
    data = json.loads((args.grid / "grid.json").read_text())
    points = [point for point in data["points"] if point.get("costly")]
    if not points:
        raise SystemExit(f"{args.grid / 'grid.json'} holds no costly grid (run reinloop eval --costly --grid)")
    print(f"Settings: {json.dumps(data['settings'])}\n")
    for title, render in (("Harmful executions", harm), ("Hopeless tasks", hopeless), ("Success", success),
                          ("Runaways", runaways), ("What each guard buys", guards)):  # fmt: skip
        if render is runaways and "runaway_runs" not in points[0]["costly"]["reinloop"]:
            continue  # a grid from before the runaways' measures
        print(f"## {title}\n\n{render(points)}\n")


if __name__ == "__main__":
    main()
