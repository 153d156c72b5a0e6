"""Framework time per loop iteration: reinloop against LangChain's `create_agent`, same tool, same script.

The model is the zero-latency scripted fake, so the figures are pure framework overhead: N iterations of
one tool call each, then a final answer. Run: python benchmarks/overhead.py [--iterations 100 400]
[--repeats 3]. Prints per-iteration milliseconds for both and the ratio reinloop / create_agent.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(iterations: int) -> list:
    # Distinct arguments every round, so reinloop's dead-loop guard never trips.
    return [tool_call("add", {"a": i, "b": 1}) for i in range(iterations)] + ["done"]


def run_reinloop(iterations: int, checkpointer) -> None:
    config = AgentConfig(max_iterations=iterations + 1)
    agent = build_agent(ScriptedChatModel(replies=script(iterations)), [add], config=config, checkpointer=checkpointer)
    result = agent.invoke({"task": "add"}, {"configurable": {"thread_id": "bench"}})
    assert result["finish_reason"] == "answered" and result["iteration"] == iterations + 1


def run_create_agent(iterations: int, checkpointer) -> None:
    agent = create_agent(ScriptedChatModel(replies=script(iterations)), [add], checkpointer=checkpointer)
    result = agent.invoke({"messages": [{"role": "user", "content": "add"}]}, {"configurable": {"thread_id": "bench"}})
    assert result["messages"][-1].content == "done"


def timed(run: Callable[[int, object], None], iterations: int, storage: str, folder: Path) -> float:
    """Seconds per iteration for one fresh run (a new database file for each SQLite run)."""
    checkpointer = None
    if storage == "sqlite":
        # The same SqliteSaver set-up for both agents: reinloop's default file checkpointer.
        checkpointer = sqlite_checkpointer(folder / f"{run.__name__}-{time.monotonic_ns()}.sqlite")
    gc.collect()
    start = time.perf_counter()
    run(iterations, checkpointer)
    elapsed = time.perf_counter() - start
    if checkpointer is not None:
        checkpointer.conn.close()
    return elapsed / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run_reinloop(3, None)  # warm imports and caches for both
        run_create_agent(3, None)
        print(f"{'iterations':>10} {'storage':>8} {'reinloop ms/it':>15} {'create_agent ms/it':>19} {'ratio':>6}")
        for iterations in args.iterations:
            for storage in ("none", "sqlite"):
                ours, theirs = [], []
                for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
                    ours.append(timed(run_reinloop, iterations, storage, folder))
                    theirs.append(timed(run_create_agent, iterations, storage, folder))
                a, b = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
                print(f"{iterations:>10} {storage:>8} {a:>15.3f} {b:>19.3f} {a / b:>6.2f}")


if __name__ == "__main__":
    main()
