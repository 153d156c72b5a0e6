"""Per-call cost of a tool call in a thread vs in a warm worker process (execute_tool, calculator).

Run from the repository root: `python scripts/bench_isolation.py [calls]`.
"""

from __future__ import annotations

import statistics
import sys
import time

from reinloop.config import AgentConfig
from reinloop.context import AgentContext
from reinloop.nodes import execute_tool
from reinloop.protocols import get_protocol
from reinloop.state import CallCheck
from reinloop.testing import ScriptedChatModel
from reinloop.tools import CalculatorTool, ToolRegistry

CALL = CallCheck(
    call_id="c1",
    name="calculator",
    args={"expression": "(12.5 + 7) * 3 / 4"},
    signature="",
    error_kind=None,
    error=None,
)


def context(isolation: str) -> AgentContext:
    registry = ToolRegistry()
    registry.add(CalculatorTool(), isolation=isolation)
    config = AgentConfig()
    return AgentContext.create(config, registry, get_protocol(config.protocol), ScriptedChatModel())


def main(calls: int) -> None:
    for isolation in ("thread", "process"):
        ctx = context(isolation)
        started = time.perf_counter()
        execute_tool(CALL, ctx, {})
        first = time.perf_counter() - started
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            (outcome,) = execute_tool(CALL, ctx, {})["tool_results"]
            times.append(time.perf_counter() - started)
            assert outcome["content"] == "14.625", outcome
        median, p90 = statistics.median(times) * 1e3, statistics.quantiles(times, n=10)[-1] * 1e3
        print(f"{isolation:8s} first call {first * 1e3:7.1f} ms; then median {median:.2f} ms, p90 {p90:.2f} ms")


# Workers started with forkserver or spawn import the main module again: keep the work under this guard.
if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
