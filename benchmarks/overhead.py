"""Framework time per loop iteration: reinloop against LangChain's `create_agent`, same tool, same script.

The model is the zero-latency scripted fake, so the figures are pure framework overhead: N iterations of
one tool call each, then a final answer. Run: python benchmarks/overhead.py [--iterations 100 400]
[--repeats 3]. Prints per-iteration milliseconds for both and the ratio reinloop / create_agent, beside
LangGraph's own floor for each graph's shape (a loop of no-op nodes: six steps per iteration like reinloop,
two like create_agent). "reinloop async" runs reinloop with durability="async" (LangGraph's default, which
create_agent uses) instead of its default "sync"; "sync cost" is reinloop / reinloop async: what saving
every step before the next one starts costs per round.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call

try:  # a reinloop tree that patched LangChain's tool helpers at import (before issue 45): time LangChain as shipped
    from reinloop._langchain import as_shipped
except ImportError:  # today's reinloop changes nothing in LangChain
    from contextlib import nullcontext as as_shipped


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(iterations: int) -> list:
    # Distinct arguments every round, so reinloop's dead-loop guard never trips.
    return [tool_call("add", {"a": i, "b": 1}) for i in range(iterations)] + ["done"]


def run_reinloop(iterations: int, checkpointer, durability: str | None = None) -> None:
    config = AgentConfig(max_iterations=iterations + 1)
    # Folding the window into summaries is part of reinloop's loop: a zero-latency summarizer does it.
    summaries = ScriptedChatModel(respond=lambda messages: "Earlier steps: added numbers.")
    model = ScriptedChatModel(replies=script(iterations))
    agent = build_agent(model, [add], config=config, checkpointer=checkpointer, summary_model=summaries)
    options = {} if durability is None or checkpointer is None else {"durability": durability}
    result = agent.invoke({"task": "add"}, {"configurable": {"thread_id": "bench"}}, **options)
    assert result["finish_reason"] == "answered" and result["iteration"] == iterations + 1


def run_create_agent(iterations: int, checkpointer) -> None:
    with as_shipped():  # LangChain as it ships (see the import)
        agent = create_agent(ScriptedChatModel(replies=script(iterations)), [add], checkpointer=checkpointer)
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "add"}]}, {"configurable": {"thread_id": "bench"}}
        )
        assert result["messages"][-1].content == "done"


class _Counter(TypedDict, total=False):
    i: int
    n: int
    n_max: int


def floor_graph(nodes: int):
    """A loop of `nodes` no-op nodes: LangGraph's own cost per iteration for a graph of that shape."""
    graph = StateGraph(_Counter)
    names = [f"step{k}" for k in range(nodes)]
    graph.add_node(names[0], lambda state: {"i": state.get("i", 0) + 1})
    for name in names[1:]:
        graph.add_node(name, lambda state: {"n": 1})
    graph.add_edge(START, names[0])
    for before, after in itertools.pairwise(names):
        graph.add_edge(before, after)
    graph.add_conditional_edges(names[-1], lambda state: END if state["i"] >= state["n_max"] else names[0])
    return graph


def run_floor(nodes: int) -> Callable[[int, object], None]:
    def run(iterations: int, checkpointer) -> None:
        app = floor_graph(nodes).compile(checkpointer=checkpointer)
        app.invoke({"i": 0, "n_max": iterations}, {"configurable": {"thread_id": "bench"}, "recursion_limit": 10**6})

    run.__name__ = f"floor{nodes}"
    return run


def run_reinloop_async(iterations: int, checkpointer) -> None:
    run_reinloop(iterations, checkpointer, durability="async")


def timed(run: Callable[[int, object], None], iterations: int, storage: str, folder: Path) -> tuple[float, float]:
    """Wall seconds and process CPU seconds per iteration for one fresh run (a new database file for each
    SQLite run)."""
    checkpointer = None
    if storage == "sqlite":
        # The same SqliteSaver set-up for both agents: reinloop's default file checkpointer.
        checkpointer = sqlite_checkpointer(folder / f"{run.__name__}-{time.monotonic_ns()}.sqlite")
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    run(iterations, checkpointer)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if checkpointer is not None:
        checkpointer.conn.close()
    return elapsed / iterations, cpu / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run_reinloop(3, None)  # warm imports and caches for both
        run_create_agent(3, None)
        runs = {
            "reinloop": run_reinloop,
            "reinloop async": run_reinloop_async,
            "create_agent": run_create_agent,
            "floor 6 nodes": run_floor(6),  # reinloop's shape: six steps per iteration
            "floor 2 nodes": run_floor(2),  # create_agent's shape: model, tools
        }
        print(
            "ms per iteration (median), process CPU time and wall time; ratio = reinloop / create_agent, with the "
            "spread of the per-repeat ratios; floor = LangGraph with no-op nodes"
        )
        names = " ".join(f"{name:>13}" for name in runs)
        print(f"{'iterations':>10} {'storage':>8} {'clock':>5} {names} {'ratio':>6} {'spread':>11} {'sync cost':>9}")
        for iterations in args.iterations:
            for storage in ("none", "sqlite"):
                times: dict[str, dict[str, list[float]]] = {"cpu": {}, "wall": {}}
                for _ in range(args.repeats):  # interleaved, so machine noise hits all alike
                    for name, run in runs.items():
                        wall, cpu = timed(run, iterations, storage, folder)
                        times["wall"].setdefault(name, []).append(wall * 1000)
                        times["cpu"].setdefault(name, []).append(cpu * 1000)
                for clock, by_name in times.items():
                    ms = {name: statistics.median(values) for name, values in by_name.items()}
                    ratios = [r / c for r, c in zip(by_name["reinloop"], by_name["create_agent"], strict=True)]
                    ratio = ms["reinloop"] / ms["create_agent"]
                    sync_cost = ms["reinloop"] / ms["reinloop async"]
                    cells = " ".join(f"{value:>13.3f}" for value in ms.values())
                    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
                    row = f"{iterations:>10} {storage:>8} {clock:>5} {cells} {ratio:>6.2f} {spread:>11}"
                    print(f"{row} {sync_cost:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
