"""Concurrent runs under asyncio: N `ainvoke` runs at once, reinloop against LangChain's `create_agent`.

Each run takes 5 rounds (4 tool calls, then an answer) of a fake chat model that answers after 50 ms of
`await asyncio.sleep`, like a remote model over the network; the tool is a plain sync function. Both agents
run in the same process, one cell after the other, without a checkpointer and with LangGraph's
`AsyncSqliteSaver` on a fresh file (and with `AsyncPostgresSaver` when REINLOOP_BENCH_POSTGRES_URL is set).
Each agent runs with its defaults: reinloop saves every step before the next (durability "sync"),
create_agent in the background ("async"); "reinloop async" is reinloop with durability="async". The floors
are LangGraph alone, with the same model latency: a loop of async no-op nodes of reinloop's shape (six steps
a round) and of create_agent's (two), on the same savers; and "floor topology", reinloop's own state schema
and wiring with the model awaited and the tool called in its nodes and nothing else done (`r/ft`: what
reinloop's work costs on top of the graph LangGraph runs for it).

Run: python benchmarks/concurrency.py [--runs 1 50 200 1000] [--repeats 2] [--rounds 5] [--latency 0.05].
Prints the wall time and CPU time of each cell (all N runs), the ratios reinloop / create_agent and reinloop /
floor topology; every run must answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from reinloop import AgentConfig, build_agent
from reinloop.testing import ScriptedChatModel, tool_call

sys.path.insert(0, str(Path(__file__).parent))  # this folder's other benchmark: reinloop's topology floor
from rounds import shape_input, topology

POSTGRES_URL = os.environ.get("REINLOOP_BENCH_POSTGRES_URL")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class RemoteModel(ScriptedChatModel):
    """A scripted model that answers after `latency` seconds of awaiting, as a model behind a network does."""

    latency: float = 0.05

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
        await asyncio.sleep(self.latency)
        return self._generate(messages, stop, None, **kwargs)


def model(rounds: int, latency: float) -> RemoteModel:
    """One model shared by all runs: its reply depends only on the tool results the run has seen."""

    def respond(messages: list[BaseMessage]) -> Any:
        done = sum(isinstance(message, ToolMessage) for message in messages)
        # Distinct arguments every round, so reinloop's repeat guard never steps in.
        return tool_call("add", {"a": done, "b": 1}) if done < rounds - 1 else "done"

    return RemoteModel(respond=respond, latency=latency)


Run = Callable[[int], Awaitable[bool]]


def reinloop_runs(rounds: int, latency: float, saver: Any, durability: str | None = None) -> Run:
    agent = build_agent(
        model(rounds, latency), [add], config=AgentConfig(max_iterations=rounds + 1), checkpointer=saver
    )
    options = {} if durability is None else {"durability": durability}

    async def run(n: int) -> bool:
        result = await agent.ainvoke({"task": "add"}, {"configurable": {"thread_id": f"r{n}"}}, **options)
        return result["finish_reason"] == "answered" and result["final_answer"] == "done"

    return run


def create_agent_runs(rounds: int, latency: float, saver: Any) -> Run:
    agent = create_agent(model(rounds, latency), [add], checkpointer=saver)

    async def run(n: int) -> bool:
        state = {"messages": [{"role": "user", "content": "add"}]}
        result = await agent.ainvoke(state, {"configurable": {"thread_id": f"c{n}"}})
        return result["messages"][-1].content == "done"

    return run


class _Counter(TypedDict, total=False):
    i: int
    n: int
    n_max: int


def floor_runs(nodes: int) -> Callable[[int, float, Any], Run]:
    """A loop of `nodes` async nodes, the first waiting `latency` as the model does, the others no-ops."""

    def build(rounds: int, latency: float, saver: Any) -> Run:
        async def model_step(state: _Counter) -> _Counter:
            await asyncio.sleep(latency)
            return {"i": state.get("i", 0) + 1}

        async def step(state: _Counter) -> _Counter:
            return {"n": 1}

        async def route(state: _Counter) -> str:
            return END if state["i"] >= state["n_max"] else names[0]

        graph = StateGraph(_Counter)
        names = [f"step{k}" for k in range(nodes)]
        graph.add_node(names[0], model_step)
        for name in names[1:]:
            graph.add_node(name, step)
        graph.add_edge(START, names[0])
        for before, after in itertools.pairwise(names):
            graph.add_edge(before, after)
        graph.add_conditional_edges(names[-1], route, [names[0], END])
        app = graph.compile(checkpointer=saver)

        async def run(n: int) -> bool:
            config = {"configurable": {"thread_id": f"f{n}"}, "recursion_limit": 10**6}
            result = await app.ainvoke({"i": 0, "n_max": rounds}, config)
            return result["i"] == rounds

        return run

    return build


def floor_topology_runs(rounds: int, latency: float, saver: Any) -> Run:
    """LangGraph's floor for reinloop's own topology with the calls a round makes: reinloop's state schema and
    wiring (the call sent to execute_tool, the conditional edges after validate_args and check_finish), the
    model awaited in decide and the tool called in execute_tool, and no other work in any node."""
    from langchain_core.messages import HumanMessage

    remote = RemoteModel(respond=lambda messages: tool_call("add", {"a": 1, "b": 1}), latency=latency)
    bound = remote.bind_tools([add])
    prompt = [HumanMessage("add")]

    async def decide(state: dict[str, Any]) -> dict[str, Any]:
        await bound.ainvoke(prompt)
        return {}

    async def execute_tool(send: dict[str, Any]) -> dict[str, Any]:
        add.invoke({"a": 1, "b": 1})
        return {}

    async def no_op(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def check_finish(state: dict[str, Any]) -> dict[str, Any]:
        return {"iteration": state["iteration"] + 1}

    no_ops = dict.fromkeys(("validate_args", "observe", "compress_memory", "circuit_break"), no_op)
    graph = topology({"decide": decide, "execute_tool": execute_tool, **no_ops, "check_finish": check_finish})
    app = graph.compile(checkpointer=saver)

    async def run(n: int) -> bool:
        config = {"configurable": {"thread_id": f"t{n}"}, "recursion_limit": 10**6}
        result = await app.ainvoke(shape_input(rounds), config)
        return bool(result["iteration"] == rounds)

    return run


@contextlib.asynccontextmanager
async def open_saver(kind: str, folder: Path) -> AsyncIterator[Any]:
    """A fresh checkpointer of `kind` for one cell."""
    if kind == "none":
        yield None
    elif kind == "sqlite":
        async with AsyncSqliteSaver.from_conn_string(str(folder / f"{time.monotonic_ns()}.sqlite")) as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        settings = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        async with AsyncConnectionPool(POSTGRES_URL, max_size=20, kwargs=settings, open=False) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver


AGENTS: dict[str, Callable[[int, float, Any], Run]] = {
    "reinloop": reinloop_runs,
    "reinloop async": lambda rounds, latency, saver: reinloop_runs(rounds, latency, saver, durability="async"),
    "create_agent": create_agent_runs,
    "floor 6 nodes": floor_runs(6),  # reinloop's shape: six steps a round
    "floor 2 nodes": floor_runs(2),  # create_agent's shape: model, tools
    "floor topology": floor_topology_runs,  # reinloop's state and wiring, with the calls
}


async def timed(agent: str, saver_kind: str, runs: int, args: argparse.Namespace, folder: Path) -> tuple[float, float]:
    """Wall seconds and process CPU seconds for `runs` concurrent runs of `agent`, each of which must answer."""
    async with open_saver(saver_kind, folder) as saver:
        run = AGENTS[agent](args.rounds, args.latency, saver)
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        answered = await asyncio.gather(*(run(n) for n in range(runs)))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if not all(answered):
        raise SystemExit(f"{agent}, {saver_kind}, N={runs}: {answered.count(False)} runs did not answer")
    return elapsed, cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 50, 200, 1000], help="concurrent runs per cell")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats of each row (median shown)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="model calls per run: rounds - 1 tool calls, then an answer"
    )
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the fake model awaits per call")
    parser.add_argument("--savers", nargs="+", default=None, help="none, sqlite, postgres (default: all available)")
    args = parser.parse_args()
    savers = args.savers or ["none", "sqlite", *(["postgres"] if POSTGRES_URL else [])]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for agent in AGENTS:  # warm imports and caches for all
            await timed(agent, "none", 2, args, folder)
        floor = args.rounds * args.latency
        calls = f"{args.rounds} model calls of {args.latency * 1000:g} ms each: {floor:.2f} s if nothing else took time"
        print(
            f"seconds of N concurrent runs ({calls}), wall time and process CPU time; median of {args.repeats}; "
            "ratio = reinloop / create_agent; r/ft = reinloop / floor topology"
        )
        names = " ".join(f"{name:>14}" for name in AGENTS)
        print(f"{'saver':>8} {'N':>5} {'clock':>5} {names} {'ratio':>6} {'spread':>16} {'r/ft':>6}")
        for saver_kind in savers:
            for runs in args.runs:
                times: dict[str, dict[str, list[float]]] = {"wall": {}, "cpu": {}}
                for _ in range(args.repeats):  # interleaved, so machine noise hits all alike
                    for agent in AGENTS:
                        wall, cpu = await timed(agent, saver_kind, runs, args, folder)
                        times["wall"].setdefault(agent, []).append(wall)
                        times["cpu"].setdefault(agent, []).append(cpu)
                for clock, by_agent in times.items():
                    seconds = {agent: statistics.median(values) for agent, values in by_agent.items()}
                    ratio = seconds["reinloop"] / seconds["create_agent"]
                    pairs = zip(by_agent["reinloop"], by_agent["create_agent"], strict=True)
                    ratios = [mine / theirs for mine, theirs in pairs]
                    spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else ""
                    cells = " ".join(f"{value:>14.2f}" for value in seconds.values())
                    to_floor = seconds["reinloop"] / seconds["floor topology"]
                    row = f"{saver_kind:>8} {runs:>5} {clock:>5} {cells} {ratio:>6.2f} {spread:>16} {to_floor:>6.2f}"
                    print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
