"""benchmarks/costly_tables.py: the docs' costly tables, read from a real (small) costly grid's grid.json."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reinloop_eval import FaultProfile
from reinloop_eval.agents import ABLATIONS, FAIR_PEER
from reinloop_eval.faults import costly_profile
from reinloop_eval.grid import GridSpec, run_grid
from tests.conftest import benchmark_script

tables = benchmark_script("costly_tables.py", "costly_tables")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    # The costly tasks alone, every model a runaway five calls wide once it knows the answer.
    base = replace(costly_profile(FaultProfile(fault_rate=0.3, tool_fault_rate=0.1)), runaway_rate=1.0, runaway_width=5)
    out = tmp_path_factory.mktemp("grid")
    run_grid(GridSpec(fault_rates=(0.3,), correct_rates=(0.7,), seeds=(100,), tasks=0, base=base), out=out)
    return out


def rows(markdown, first):
    """The cells of the table rows of `markdown` whose first cell is `first`."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith(f"| {first} |")]  # fmt: skip


def test_the_tables_give_the_grids_figures(grid):
    point = json.loads((grid / "grid.json").read_text())["points"][0]
    ours, peer = point["costly"]["reinloop"], point["costly"][FAIR_PEER]
    (harm,) = rows(tables.harm([point]), "0.3 / 0.7")
    assert harm[1:3] == [str(ours["harmful_executions"]), str(peer["harmful_executions"])]
    (success,) = rows(tables.success([point]), "0.3 / 0.7")
    assert success[3:5] == [str(point["paired"][FAIR_PEER]["wins"]), str(point["paired"][FAIR_PEER]["losses"])]
    (runaway,) = rows(tables.runaways([point]), "0.3 / 0.7")
    assert runaway[1] == str(ours["runaway_runs"]) == "12"  # every run's draw (a hopeless one never gets that far)


def test_what_each_guard_buys_has_a_row_per_ablation_and_counts_the_intervals_that_exclude_zero(grid):
    point = json.loads((grid / "grid.json").read_text())["points"][0]
    text = tables.guards([point])
    names = [line.split("|")[1].strip() for line in text.splitlines()[2:]]
    assert names == [agent.removeprefix("reinloop -") for agent in ABLATIONS]
    (cap,) = rows(text, "max_tool_attempts")
    # five calls a decision: without the cap a runaway makes more tool runs
    assert cap[5].endswith("(1 of 1)") and cap[5].startswith("-")
