"""The fault grid: at two points with the runaway fault on, reinloop never crashes and stays within
max_iterations while the plain create_agent runs over budget; each point aggregates its seeds; the markdown,
JSON and PNG are written; worker processes give the same figures."""

import json
import statistics

import pytest

from reinloop_eval import AGENTS, FaultProfile, GridSpec, run_grid
from reinloop_eval.agents import ABLATIONS, FAIR_PEER
from reinloop_eval.grid import PEERS, REFERENCE

# Slow calls hang longer than reinloop's timeout: until the run ends, in real time (simulated time counts it).
RUNAWAY = FaultProfile(tool_fault_rate=0.1, runaway_rate=0.5, stubborn_rate=0.2)
TWO_POINTS = GridSpec(fault_rates=(0.1, 0.5), correct_rates=(0.3,), seeds=(0, 1), tasks=8, base=RUNAWAY)


@pytest.fixture(scope="module")
def runaway_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid")
    calls = []
    grid = run_grid(TWO_POINTS, out=out, progress=lambda done, total: calls.append((done, total)))
    return grid, out, calls


def test_reinloop_never_crashes_and_never_exceeds_max_iterations_with_the_runaway_on(runaway_grid):
    grid, _, _ = runaway_grid
    assert len(grid.points) == 2
    for point in grid.points:
        for summary in point["seeds"].values():  # over budget: more than max_iterations decisions, or stopped
            assert summary["reinloop"]["crashes"] == 0 and summary["reinloop"]["over_budget_runs"] == 0


def test_the_plain_create_agent_runs_over_budget_with_the_runaway_on(runaway_grid):
    grid, _, _ = runaway_grid
    for point in grid.points:
        assert point["agents"]["create_agent"]["over_budget_runs"] > 0
        assert point["agents"]["create_agent"]["crashes"] < point["agents"]["create_agent"]["runs"]


def test_each_point_aggregates_its_seeds(runaway_grid):
    grid, _, _ = runaway_grid
    for point in grid.points:
        seeds = point["seeds"]
        assert sorted(seeds) == ["0", "1"]
        for agent in AGENTS:
            rates = [seeds[seed][agent]["success_rate"] for seed in seeds]
            row = point["agents"][agent]
            assert row["success_rate"] == pytest.approx(statistics.mean(rates))
            assert (row["success_min"], row["success_max"]) == (min(rates), max(rates))
            assert row["runs"] == 16 and row["prompt_tokens"] == sum(seeds[s][agent]["prompt_tokens"] for s in seeds)
        best = max(point["agents"][peer]["success_rate"] for peer in PEERS)
        assert point["agents"][point["best_peer"]]["success_rate"] == best
        assert point["reinloop_minus_best_peer"] == pytest.approx(point["agents"]["reinloop"]["success_rate"] - best)
        assert point["reference"] == REFERENCE == FAIR_PEER
        assert not set(ABLATIONS) & set(PEERS)  # reinloop's ablations are not its peers
        for agent, row in point["agents"].items():  # all tokens of the point's runs over its successful runs
            tokens = sum(seeds[s][agent]["prompt_tokens"] + seeds[s][agent]["completion_tokens"] for s in seeds)
            assert row["successes"] == sum(seeds[s][agent]["successes"] for s in seeds) > 0
            assert row["tokens_per_success"] == pytest.approx(tokens / row["successes"], abs=0.1)
            assert row["completion_tokens"] > 0
        per_success = {agent: point["agents"][agent]["tokens_per_success"] for agent in ("reinloop", REFERENCE)}
        assert point["tokens_per_success_vs_reference"] == pytest.approx(
            per_success["reinloop"] / per_success[REFERENCE]
        )
        tokens = {agent: point["agents"][agent]["prompt_tokens"] for agent in ("reinloop", REFERENCE)}
        messages = {agent: tokens[agent] - point["agents"][agent]["tool_schema_tokens"] for agent in tokens}
        assert all(0 < messages[agent] < tokens[agent] for agent in tokens)
        assert point["message_tokens_vs_reference"] == pytest.approx(messages["reinloop"] / messages[REFERENCE])


def test_the_grid_writes_its_table_as_markdown_and_json_and_the_heatmap(runaway_grid):
    grid, out, _ = runaway_grid
    assert {path.name for path in grid.files} == {"grid.md", "grid.json", "grid.png"} and grid.chart
    data = json.loads((out / "grid.json").read_text())
    assert data["settings"]["seeds"] == [0, 1] and data["settings"]["runaway_rate"] == 0.5
    assert [(p["fault_rate"], p["correct_rate"]) for p in data["points"]] == [(0.1, 0.3), (0.5, 0.3)]
    assert data["points"] == json.loads(json.dumps(grid.points))
    text = (out / "grid.md").read_text()
    assert grid.table in text and "## Fault model" in text and "Runaway" in text and "## Metrics" in text
    rows = [line for line in grid.table.splitlines() if line.startswith(("| 0.1 / 0.3 |", "| 0.5 / 0.3 |"))]
    assert len(rows) == 2
    first = data["points"][0]
    reinloop = first["agents"]["reinloop"]
    shown = f"{reinloop['success_rate']:.0%} ({reinloop['success_min'] * 100:.0f}-{reinloop['success_max'] * 100:.0f})"
    ratios = f"{first['tokens_per_success_vs_reference']:.2f}x ({first['message_tokens_vs_reference']:.2f}x)"
    assert shown in rows[0] and ratios in rows[0]
    assert all(f"| 0.5 / 0.3 | {agent} |" in text for agent in AGENTS)  # the cost table, per point and agent
    guards = text.split("## What each guard buys")[1].split("## Cost")[0]  # each ablation paired with reinloop
    assert all(f"| 0.5 / 0.3 | {agent} | 16 |" in guards for agent in ABLATIONS)
    assert all(first["paired_tokens"][agent]["pairs"] == first["paired"][agent]["pairs"] == 16 for agent in ABLATIONS)
    assert (out / "grid.png").read_bytes()[:4] == b"\x89PNG"


def test_progress_counts_every_run(runaway_grid):
    _, _, calls = runaway_grid
    total = 2 * 2 * 8 * len(AGENTS)
    assert calls[-1] == (total, total) and len(calls) == total


def test_worker_processes_give_the_same_figures(tmp_path):
    # Tool faults, slow calls included: simulated time, so the two runs cannot differ by timing.
    steady = FaultProfile(tool_fault_rate=0.2, runaway_rate=0.5, stubborn_rate=0.2)
    spec = GridSpec(fault_rates=(0.3,), correct_rates=(0.3,), seeds=(0, 1), tasks=3, base=steady)
    alone = run_grid(spec, out=tmp_path / "one")
    calls = []
    shared = run_grid(spec, out=tmp_path / "two", workers=2, progress=lambda done, total: calls.append(done))

    assert json.dumps(shared.points) == json.dumps(alone.points)  # no real time in any figure
    assert calls == [3 * len(AGENTS), 6 * len(AGENTS)]  # a suite's runs at a time
