"""The ceiling of issue 14's last lever, a smaller state: what fewer channel writes a round would save.

reinloop's nodes write, besides the messages, about twelve state keys a round (counted from the SQLite
`writes` table of a run: decision, usage and last_call by decide; checks, calls_seen and the reset of
tool_results by validate_args; tool_results by execute_tool; tool_attempts and call_window by observe;
pending by compress_memory; iteration and iterations_left by check_finish). Folding the keys that one node
writes together into one (last_call into usage, calls_seen into checks, tool_attempts into call_window,
iterations_left replaced by a limit written once, and tool_results kept to the latest round by their
reducer, with no reset) would leave seven. Both patterns run here as six nodes over reinloop's state schema
with the values' shapes but none of the work, so that what is timed is LangGraph and the saver: `many`
writes twelve keys a round, `folded` seven. Interleaved repeats; the figure is the median ms per round and
the ratio folded / many per repeat.

Run: python benchmarks/writes.py [--rounds 1000] [--repeats 5] [--storage sync]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.types import Overwrite
from rounds import _run_floor, node_loop, shape_input

from reinloop import sqlite_checkpointer
from reinloop.state import RunState

Node = Callable[[dict[str, Any]], dict[str, Any]]


def many(rounds: int) -> dict[str, Node]:
    """The keys reinloop's nodes write a round, one write each."""
    return {
        "decide": lambda s: {
            "decision": {"kind": "call", "i": s["iteration"]},
            "usage": {"tokens": s["iteration"]},
            "last_call": {"prompt_tokens": s["iteration"]},
        },
        "validate_args": lambda s: {
            "checks": [s["iteration"]],
            "calls_seen": s["iteration"],
            "tool_results": Overwrite([]),
        },
        "execute_tool": lambda s: {"tool_results": [s["iteration"]]},
        "observe": lambda s: {"tool_attempts": s["iteration"], "call_window": [[s["iteration"]]]},
        "compress_memory": lambda s: {"pending": [str(s["iteration"])]},
        "check_finish": lambda s: {"iteration": s["iteration"] + 1, "iterations_left": rounds - s["iteration"]},
    }


def folded(rounds: int) -> dict[str, Node]:
    """The same values, the keys a node writes together folded into one."""
    return {
        "decide": lambda s: {
            "decision": {"kind": "call", "i": s["iteration"]},
            "usage": {"tokens": s["iteration"], "last": {"prompt_tokens": s["iteration"]}},
        },
        "validate_args": lambda s: {"checks": [s["iteration"], s["iteration"]]},
        # A reducer that keeps only the latest round's outcomes would need no reset: one write replaces them.
        "execute_tool": lambda s: {"tool_results": Overwrite([s["iteration"]])},
        "observe": lambda s: {"call_window": [[s["iteration"]], s["iteration"]]},
        "compress_memory": lambda s: {"pending": [str(s["iteration"])]},
        "check_finish": lambda s: {"iteration": s["iteration"] + 1},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--storage", choices=("none", "sync", "async"), default="sync")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"many": [], "folded": []}
    for _ in range(args.repeats):
        for name, nodes in (("many", many), ("folded", folded)):
            with tempfile.TemporaryDirectory() as folder:
                saver = None if args.storage == "none" else sqlite_checkpointer(Path(folder) / "floor.db")
                durability = None if args.storage == "none" else args.storage
                start = time.perf_counter()
                floor = node_loop(RunState, nodes(args.rounds), lambda state: state["iteration"] >= args.rounds)
                _run_floor(floor, shape_input(args.rounds), saver, durability)
                times[name].append((time.perf_counter() - start) / args.rounds * 1000)
    for name, values in times.items():
        print(f"{name:7} {statistics.median(values):.3f} ms a round ({min(values):.3f}-{max(values):.3f})")
    ratios = [after / before for after, before in zip(times["folded"], times["many"], strict=True)]
    print(f"folded / many: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
          f"{args.rounds} rounds, storage {args.storage}, {args.repeats} repeats")  # fmt: skip


if __name__ == "__main__":
    main()
