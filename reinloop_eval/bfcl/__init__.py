"""BFCL, the Berkeley Function Calling Leaderboard, as an external benchmark of the evaluation: its AST categories
and its multi-turn base category run through reinloop and the peers on the same model, scored by BFCL's own
checkers. BFCL runs in an environment of its own (`bridge`); `tasks` turns its entries into tools and replay
plans, `run` runs the agents, `report` writes the accuracies with their intervals."""

from reinloop_eval.bfcl.bridge import BFCL_VERSION, Bfcl, BfclError, bfcl_python, install
from reinloop_eval.bfcl.report import summarize_bfcl, wilson, write_bfcl_report
from reinloop_eval.bfcl.run import BFCL_AGENTS, BfclRecord, replay_faults, run_bfcl, run_task
from reinloop_eval.bfcl.tasks import AST_CATEGORIES, CATEGORIES, BfclTask, Category, load_tasks

__all__ = [
    "AST_CATEGORIES",
    "BFCL_AGENTS",
    "BFCL_VERSION",
    "CATEGORIES",
    "Bfcl",
    "BfclError",
    "BfclRecord",
    "BfclTask",
    "Category",
    "bfcl_python",
    "install",
    "load_tasks",
    "replay_faults",
    "run_bfcl",
    "run_task",
    "summarize_bfcl",
    "wilson",
    "write_bfcl_report",
]
