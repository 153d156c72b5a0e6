"""What a run leaves on disk with SQLite: the database file and its -wal file, per round (issue 29).

A run of N rounds (one `add` call each, new arguments every round, then an answer) by the zero-latency scripted
model on a fresh file with reinloop's defaults (`sqlite_checkpointer`, durability "sync"); after the run,
before the saver closes, the sizes of the database file and of its -wal file are read, and the process CPU time
and wall time of the run. Repeated on fresh files; prints each repeat and the median.

Run: python benchmarks/disk.py [--rounds 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def one_run(rounds: int, folder: Path) -> tuple[int, int, float, float]:
    path = folder / "runs.sqlite"
    saver = sqlite_checkpointer(path)
    model = ScriptedChatModel(replies=[tool_call("add", {"a": i, "b": 1}) for i in range(rounds)] + ["done"])
    agent = build_agent(model, [add], config=AgentConfig(max_iterations=rounds + 1), checkpointer=saver)
    cpu, wall = time.process_time(), time.perf_counter()
    result = agent.invoke({"task": "add"}, {"configurable": {"thread_id": "t"}})
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result["finish_reason"] == "answered"
    wal = path.with_name(path.name + "-wal")
    sizes = path.stat().st_size, wal.stat().st_size if wal.exists() else 0
    saver.conn.close()
    return *sizes, cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    totals = []
    print(f"{args.rounds} rounds with SQLite (reinloop defaults); kB per round")
    print("repeat  database  -wal  total  cpu s  wall s")
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as folder:
            db, wal, cpu, wall = one_run(args.rounds, Path(folder))
        total = (db + wal) / 1000 / args.rounds
        totals.append(total)
        print(f"{repeat + 1:>6}  {db / 1000 / args.rounds:8.1f}  {wal / 1000 / args.rounds:4.1f}  {total:5.1f}  "
              f"{cpu:5.2f}  {wall:6.2f}")  # fmt: skip
    print(f"median total: {statistics.median(totals):.1f} kB per round (spread {min(totals):.1f}-{max(totals):.1f})")


if __name__ == "__main__":
    main()
