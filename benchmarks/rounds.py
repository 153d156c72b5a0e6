"""Cost of one round, against create_agent and LangGraph's floor, by rounds, saver and durability (issue 14).

Every agent runs N rounds of one `add` call each (new arguments every round) and then answers, driven by the
zero-latency scripted model, so what is timed is framework work. Runs are interleaved, repeat by repeat, so
machine noise hits every column alike; each cell is the median per-round milliseconds over the repeats, with
the spread (min-max) printed under `--spread`.

Columns:
- `reinloop`: `build_agent` with reinloop's defaults, its zero-latency summarizer folding the window.
- `create_agent`: LangChain's agent, same model and tool (two LangGraph steps a round).
- `floor shape`: LangGraph's floor for reinloop's shape: six no-op nodes a round over reinloop's own state
  schema (`RunState`: the same keys and reducers), every key given a small value at the start, so each
  checkpoint carries the channels reinloop's do. `floor min`: six no-op nodes over a three-key state.
  `floor topology`: floor shape wired as reinloop's diagram (the round's call sent to execute_tool as a
  `Send` by a conditional edge after validate_args, a conditional edge after check_finish, circuit_break
  beside): what LangGraph costs for the edges the guards need, with no work in any node.
- `calls`: the model and tool calls one reinloop round makes, made directly (the scripted model's `invoke`
  on the prompt's messages, the tool's `invoke`): what no framework can save.

Ratios: `r/ca` = reinloop / create_agent; `r/fl` = reinloop / (floor shape + calls), the issue's acceptance
figure (<= 1.15 at 100 rounds without a saver and at 400 with SQLite; r/ca <= 0.5 at 1,000 with SQLite);
`ft/fl` = (floor topology + calls) / (floor shape + calls): how much of the 1.15 the edges alone take;
`r/ft` = reinloop / (floor topology + calls), issue 29's acceptance figure (<= 1.75 without a saver, <= 1.5
with SQLite). Each row is printed for wall time and for the process's CPU time.

With SQLite, also per round of the reinloop thread: `ckpt B` the bytes of the latest checkpoint (checkpoint
and metadata blobs as stored; it is the same whatever the round, if the state is bounded), `ckpt@1/2` the
same for the checkpoint saved halfway (flat means equal), `db B/rd` the database file's size / rounds.

Run: python benchmarks/rounds.py [--rounds 100 400 1000] [--storage none sync async] [--repeats 3]
     [--only reinloop floor-shape] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.state import FRESH_BUDGETS, CallUsage, RunState
from reinloop.testing import ScriptedChatModel, tool_call

try:  # a reinloop tree that patched LangChain's tool helpers at import (before issue 45): time LangChain as shipped
    from reinloop._langchain import as_shipped
except ImportError:  # today's reinloop changes nothing in LangChain
    from contextlib import nullcontext as as_shipped

THREAD = "bench"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(rounds: int) -> list[Any]:
    # Distinct arguments every round, so reinloop's dead-loop guard never trips.
    return [tool_call("add", {"a": i, "b": 1}) for i in range(rounds)] + ["done"]


def _config(durability: str | None) -> dict[str, Any]:
    return {} if durability is None else {"durability": durability}


def run_reinloop(rounds: int, saver: Any, durability: str | None) -> None:
    summaries = ScriptedChatModel(respond=lambda messages: "Earlier steps: added numbers.")
    model = ScriptedChatModel(replies=script(rounds))
    agent = build_agent(model, [add], config=AgentConfig(max_iterations=rounds + 1), checkpointer=saver,
                        summary_model=summaries)  # fmt: skip
    result = agent.invoke({"task": "add"}, {"configurable": {"thread_id": THREAD}}, **_config(durability))
    assert result["finish_reason"] == "answered" and result["iteration"] == rounds + 1, result["finish_reason"]


def run_create_agent(rounds: int, saver: Any, durability: str | None) -> None:
    with as_shipped():  # LangChain as it ships (see the import)
        agent = create_agent(ScriptedChatModel(replies=script(rounds)), [add], checkpointer=saver)
        result = agent.invoke({"messages": [{"role": "user", "content": "add"}]},
                              {"configurable": {"thread_id": THREAD}}, **_config(durability))  # fmt: skip
        assert result["messages"][-1].content == "done"


class _Counter(TypedDict, total=False):
    i: int
    n: int
    n_max: int


def _six_no_ops(schema: type[Any], bump: Callable[[dict[str, Any]], dict[str, Any]], done: Callable[..., bool]) -> Any:
    nodes = {"step0": bump, **{f"step{k}": lambda state: {} for k in range(1, 6)}}
    return node_loop(schema, nodes, done)


def node_loop(schema: type[Any], nodes: dict[str, Callable[[dict[str, Any]], Any]], done: Callable[..., bool]) -> Any:
    """`nodes` run in order, from the first again until `done(state)`: a floor's round, one step a node."""
    graph = StateGraph(schema)
    for name, node in nodes.items():
        graph.add_node(name, node)
    names = list(nodes)
    graph.add_edge(START, names[0])
    for before, after in itertools.pairwise(names):
        graph.add_edge(before, after)
    graph.add_conditional_edges(names[-1], lambda state: END if done(state) else names[0])
    return graph


def _run_floor(graph: Any, values: dict[str, Any], saver: Any, durability: str | None) -> None:
    """One run of a floor graph from `values`, without LangGraph's step limit."""
    graph.compile(checkpointer=saver).invoke(values, {"configurable": {"thread_id": THREAD}, "recursion_limit": 10**6},
                                             **_config(durability))  # fmt: skip


def run_floor_min(rounds: int, saver: Any, durability: str | None) -> None:
    graph = _six_no_ops(_Counter, lambda state: {"i": state.get("i", 0) + 1}, lambda s: s["i"] >= s["n_max"])
    _run_floor(graph, {"i": 0, "n_max": rounds}, saver, durability)


def shape_input(rounds: int) -> dict[str, Any]:
    """Every key of reinloop's state with a small value of its type, as a running reinloop thread has them."""
    return {
        **FRESH_BUDGETS,
        "task": "add",
        "messages": [HumanMessage("add", id="m0")],
        "decision": {"kind": "answer", "calls": [], "answer": "done", "raw": None, "error": None},
        "correction": None,
        "checks": [],
        "tool_results": [],
        "calls_seen": 0,
        "in_doubt": [],
        "iteration": 0,
        "iterations_left": rounds,
        "summaries": [],
        "pending": [],
        "folds": 0,
        "last_call": CallUsage(node="decide", prompt_tokens=0, completion_tokens=0, counted_prompt_tokens=0,
                               source="tiktoken"),
    }  # fmt: skip


def run_floor_shape(rounds: int, saver: Any, durability: str | None) -> None:
    graph = _six_no_ops(RunState, lambda state: {"iteration": state["iteration"] + 1},
                        lambda s: s["iteration"] >= s["iterations_left"])  # fmt: skip
    _run_floor(graph, shape_input(rounds), saver, durability)


def topology(nodes: dict[str, Callable[..., Any]]) -> Any:
    """reinloop's wiring over its state schema, each phase run by `nodes` (a function by node name): the round's
    call sent to execute_tool as a `Send` after validate_args, a conditional edge after check_finish, whose
    node must count `iteration`, and circuit_break beside."""
    graph = StateGraph(RunState)
    for name, node in nodes.items():
        graph.add_node(name, node)
    graph.add_edge(START, "decide")
    graph.add_edge("decide", "validate_args")
    graph.add_conditional_edges("validate_args", lambda state: [Send("execute_tool", {"call_id": "call"})],
                                ["execute_tool", "observe", "decide", "check_finish"])  # fmt: skip
    graph.add_edge("execute_tool", "observe")
    graph.add_edge("observe", "compress_memory")
    graph.add_edge("compress_memory", "check_finish")
    graph.add_conditional_edges("check_finish", lambda s: END if s["iteration"] >= s["iterations_left"] else "decide",
                                ["decide", "circuit_break", END])  # fmt: skip
    graph.add_edge("circuit_break", END)
    return graph


def run_floor_topology(rounds: int, saver: Any, durability: str | None) -> None:
    phases = ("decide", "validate_args", "execute_tool", "observe", "compress_memory", "circuit_break")
    nodes: dict[str, Callable[..., Any]] = {name: lambda state: {} for name in phases}
    graph = topology({**nodes, "check_finish": lambda state: {"iteration": state["iteration"] + 1}})
    _run_floor(graph, shape_input(rounds), saver, durability)


def run_calls(rounds: int, saver: Any, durability: str | None) -> None:
    """The model and tool calls of `rounds` reinloop rounds, made directly: one decision and one tool run each."""
    model = ScriptedChatModel(replies=script(rounds)).bind_tools([add])
    prompt = [SystemMessage("You are an agent."), HumanMessage("add")]
    for _ in range(rounds):
        reply = model.invoke(prompt)
        result = add.invoke(reply.tool_calls[0]["args"])
        prompt = [*prompt[-8:], reply, ToolMessage(str(result), tool_call_id=reply.tool_calls[0]["id"])]
    model.invoke(prompt)


RUNS: dict[str, Callable[[int, Any, str | None], None]] = {
    "reinloop": run_reinloop,
    "create_agent": run_create_agent,
    "floor-shape": run_floor_shape,
    "floor-min": run_floor_min,
    "floor-topology": run_floor_topology,
    "calls": run_calls,
}


def sizes(path: Path, rounds: int) -> dict[str, float]:
    """Bytes per round of a SQLite thread: the latest and the middle checkpoint, and the whole file."""
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT length(checkpoint) + length(metadata) FROM checkpoints WHERE checkpoint_ns = '' ORDER BY checkpoint_id"
    ).fetchall()
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    (writes,) = conn.execute("SELECT coalesce(sum(length(value)), 0) FROM writes").fetchone()
    conn.close()
    return {"ckpt": rows[-1][0], "ckpt_mid": rows[len(rows) // 2][0], "checkpoints": len(rows),
            "db_per_round": pages * page_size / rounds, "writes_per_round": writes / rounds}  # fmt: skip


def timed(name: str, rounds: int, storage: str, folder: Path) -> tuple[float, float, dict[str, float]]:
    """Wall and CPU milliseconds per round for one fresh run (a new database file for each SQLite run), and its
    sizes. CPU time is the process's, every thread's (the saver's writer and the tool threads included): less
    moved by other processes on a shared machine than wall time, and blind to waits."""
    saver, path = None, folder / f"{name}-{time.monotonic_ns()}.sqlite"
    durability = None if storage == "none" else storage
    if storage != "none" and name != "calls":
        saver = sqlite_checkpointer(path)
    gc.collect()
    start, cpu_start = time.perf_counter(), time.process_time()
    RUNS[name](rounds, saver, durability)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    measured: dict[str, float] = {}
    if saver is not None:
        saver.conn.close()
        measured = sizes(path, rounds)
        path.unlink()
    return elapsed * 1000 / rounds, cpu * 1000 / rounds, measured


def measure(names: list[str], rounds: int, storage: str, repeats: int, folder: Path) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    size: dict[str, dict[str, float]] = {}
    for _ in range(repeats):  # interleaved
        for name in names:
            ms, cpu_ms, measured = timed(name, rounds, storage, folder)
            times[name].append(ms)
            cpu[name].append(cpu_ms)
            size[name] = measured or size.get(name, {})
    return {"times": times, "cpu": cpu, "sizes": size}


def _ratios(ms: dict[str, float]) -> str:
    """r/ca, r/fl, ft/fl and r/ft of one row's medians (0 where a column was not run)."""
    floor = ms.get("floor-shape", 0) + ms.get("calls", 0)
    topology = ms.get("floor-topology", 0) + ms.get("calls", 0) if "floor-topology" in ms else 0
    mine = ms.get("reinloop", 0)
    ratios = (
        mine / ms["create_agent"] if mine and "create_agent" in ms else 0,
        mine / floor if mine and floor else 0,
        topology / floor if topology and floor else 0,
        mine / topology if mine and topology else 0,
    )
    return " ".join(f"{ratio:>5.2f}" for ratio in ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[100, 400, 1000])
    parser.add_argument("--storage", nargs="+", choices=["none", "sync", "async"], default=["none", "sync", "async"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--spread", action="store_true", help="print min-max under each median")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    args = parser.parse_args()
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.only:  # warm imports and caches
            timed(name, 3, "none", folder)
        header = " ".join(f"{name:>12}" for name in args.only)
        print("ms per round, median of", args.repeats, "interleaved repeats; wall time, then process CPU time")
        print(f"{'rounds':>6} {'storage':>7} {'clock':>5} {header} {'r/ca':>5} {'r/fl':>5} {'ft/fl':>5} {'r/ft':>5} "
              f"{'ckpt B':>7} {'ckpt@1/2':>8} {'db B/rd':>8}")  # fmt: skip
        for rounds in args.rounds:
            for storage in args.storage:
                result = measure(args.only, rounds, storage, args.repeats, folder)
                out.append({"rounds": rounds, "storage": storage, **result})
                own = result["sizes"].get("reinloop", {})
                for clock, key in (("wall", "times"), ("cpu", "cpu")):
                    ms = {name: statistics.median(values) for name, values in result[key].items()}
                    cells = " ".join(f"{value:>12.3f}" for value in ms.values())
                    print(f"{rounds:>6} {storage:>7} {clock:>5} {cells} {_ratios(ms)} {own.get('ckpt', 0):>7.0f} "
                          f"{own.get('ckpt_mid', 0):>8.0f} {own.get('db_per_round', 0):>8.0f}", flush=True)  # fmt: skip
                    if args.spread:
                        spreads = " ".join(f"{min(v):>5.2f}-{max(v):<6.2f}" for v in result[key].values())
                        print(f"{'':>20} {spreads}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
