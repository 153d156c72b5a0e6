"""Where a round's CPU time goes: reinloop against the LangGraph floors under it, and the parts of its own work.

Every run is `benchmarks/rounds.py`'s: N rounds of one `add` call each with the zero-latency scripted model, no
saver. Runs are interleaved, repeat by repeat; each cell is the median CPU milliseconds per round (the process's,
every thread's) with its spread (min-max). Columns:
- `reinloop`, `create_agent`, `floor topology`, `calls`: as in `rounds.py`.
- `replay`: the floor topology whose nodes return, step by step, exactly the updates reinloop's nodes wrote in a
  recorded run (the same objects): LangGraph's cost for reinloop's graph and its state traffic, with no work of
  reinloop's in any node. `replay - floor topology` is what reinloop's writes cost LangGraph.
- `reinloop, tools inline` and `create_agent, tools inline` (diagnostics, not agents anyone should run): the tool
  called in the node's own thread, for reinloop without its hard deadline (`call_with_timeout` replaced by a
  plain call), for create_agent without ToolNode's thread pool per step (`get_executor_for_config` replaced by an
  inline executor). The difference to each agent is what its thread hop costs a round.
Then, per node of reinloop, the thread CPU time of its function (the model's call inside decide, the
summarizer's inside compress_memory), and of the other threads (the tool's worker).

Run: python benchmarks/anatomy.py [--rounds 100] [--repeats 9]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import langgraph.prebuilt.tool_node as tool_node
from rounds import add, run_calls, run_create_agent, run_floor_topology, run_reinloop, script, shape_input, topology

import reinloop.graph as agent_graph
import reinloop.tools.execution as execution
from reinloop import AgentConfig, build_agent
from reinloop.testing import ScriptedChatModel

NODES = ("decide", "validate_args", "execute_tool", "observe", "compress_memory", "check_finish")


def record(rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Each node's updates, in order, from one reinloop run of `rounds` rounds."""
    summaries = ScriptedChatModel(respond=lambda messages: "Earlier steps: added numbers.")
    agent = build_agent(ScriptedChatModel(replies=script(rounds)), [add],
                        config=AgentConfig(max_iterations=rounds + 1), summary_model=summaries)  # fmt: skip
    updates: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for chunk in agent.stream({"task": "add"}, {"configurable": {"thread_id": "anatomy"}}, stream_mode="updates"):
        for node, update in chunk.items():
            updates[node].append(update or {})
    return updates


def run_replay(updates: dict[str, list[dict[str, Any]]], rounds: int) -> None:
    steps = {name: iter(updates.get(name, [])) for name in (*NODES, "circuit_break")}
    nodes: dict[str, Callable[..., Any]] = {name: functools.partial(lambda it, state: next(it, {}), it)
                                            for name, it in steps.items()}  # fmt: skip
    # The recorded check_finish updates count `iteration` up to rounds + 1: the route ends the run there.
    graph = topology(nodes)
    graph.branches["check_finish"].clear()
    graph.add_conditional_edges("check_finish", lambda state: "__end__" if state["iteration"] > rounds else "decide",
                                ["decide", "circuit_break", "__end__"])  # fmt: skip
    graph.compile().invoke(shape_input(rounds), {"recursion_limit": 10**6})


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


class _InlineExecutor:
    """ToolNode's executor, running each call in the calling thread."""

    def __enter__(self) -> _InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[..., Any], *iterables: Any) -> Iterator[Any]:
        return map(fn, *iterables)


def _reinloop_inline(rounds: int) -> None:
    with patched(execution, "call_with_timeout", lambda fn, timeout_s: fn()):
        run_reinloop(rounds, None, None)


def _create_agent_inline(rounds: int) -> None:
    with patched(tool_node, "get_executor_for_config", lambda config: _InlineExecutor()):
        run_create_agent(rounds, None, None)


def _node_times(rounds: int) -> dict[str, float]:
    """Thread CPU ms per round of each node's function, and of the other threads, in one reinloop run."""
    spent: dict[str, float] = collections.defaultdict(float)

    def timed(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(node)
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return node(*args, **kwargs)
            finally:
                spent[name] += time.thread_time() - start

        return run

    with contextlib.ExitStack() as stack:
        for name in NODES:  # before build_agent binds them (LangGraph reads their signatures through __wrapped__)
            stack.enter_context(patched(agent_graph, name, timed(name, getattr(agent_graph, name))))
        gc.collect()
        process, main = time.process_time(), time.thread_time()
        run_reinloop(rounds, None, None)
        process, main = time.process_time() - process, time.thread_time() - main
    nodes = sum(spent.values())
    times = {name: spent[name] for name in NODES}
    times |= {"other threads (the tool)": process - main, "LangGraph and the rest": main - nodes, "all": process}
    return {name: seconds * 1000 / rounds for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    rounds = args.rounds
    updates = record(rounds)
    runs: dict[str, Callable[[int], None]] = {
        "reinloop": lambda n: run_reinloop(n, None, None),
        "create_agent": lambda n: run_create_agent(n, None, None),
        "floor topology": lambda n: run_floor_topology(n, None, None),
        "replay": lambda n: run_replay(updates, n),
        "calls": lambda n: run_calls(n, None, None),
        "reinloop, tools inline": _reinloop_inline,
        "create_agent, tools inline": _create_agent_inline,
    }
    for run in runs.values():  # warm imports and caches
        run(3)
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    nodes: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(args.repeats):
        for name, run in runs.items():
            gc.collect()
            start = time.process_time()
            run(rounds)
            cpu[name].append((time.process_time() - start) * 1000 / rounds)
        for name, ms in _node_times(rounds).items():
            nodes[name].append(ms)

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    print(f"{rounds} rounds without a saver, CPU ms per round, median (min-max) of {args.repeats} interleaved repeats")
    for name, values in cpu.items():
        print(f"  {name:28} {cell(values)}")
    median = {name: statistics.median(values) for name, values in cpu.items()}
    print(
        f"  reinloop's writes to LangGraph (replay - floor topology): {median['replay'] - median['floor topology']:.3f}"
    )
    print(f"  reinloop's thread hop: {median['reinloop'] - median['reinloop, tools inline']:.3f}; "
          f"create_agent's: {median['create_agent'] - median['create_agent, tools inline']:.3f}")  # fmt: skip
    print(f"  r/ca {median['reinloop'] / median['create_agent']:.2f}, "
          f"r/ft {median['reinloop'] / (median['floor topology'] + median['calls']):.2f}")  # fmt: skip
    print("reinloop's nodes, thread CPU ms per round, median (min-max)")
    for name, values in nodes.items():
        print(f"  {name:28} {cell(values)}")


if __name__ == "__main__":
    main()
