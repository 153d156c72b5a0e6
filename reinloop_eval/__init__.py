"""The evaluation suite: 50 tasks, a simulated model with seeded faults shared by five agents, and the
fault grid over fault rates, correct rates and seeds.

A package beside reinloop, over its public API only (tests/test_imports.py checks it); reinloop never imports
it, and `reinloop eval` loads it when the command runs."""

from reinloop_eval.benchmark import Benchmark, run_benchmark
from reinloop_eval.grid import Grid, GridSpec, run_grid
from reinloop_eval.run import AGENTS, BUDGET, RunRecord, evaluate_suite, summarize_runs, write_report
from reinloop_eval.simulated import FAULT_MODEL, FaultProfile, SimulatedModel
from reinloop_eval.tasks import SUITE, EvalTask, Step

__all__ = [
    "AGENTS",
    "BUDGET",
    "FAULT_MODEL",
    "SUITE",
    "Benchmark",
    "EvalTask",
    "FaultProfile",
    "Grid",
    "GridSpec",
    "RunRecord",
    "SimulatedModel",
    "Step",
    "evaluate_suite",
    "run_benchmark",
    "run_grid",
    "summarize_runs",
    "write_report",
]
