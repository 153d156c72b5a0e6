"""Agent factories for the batch tests and the scaling benchmark, importable by path (``tests.batch_agents:...``)
in this process and in Ray's worker processes.

The model is scripted from what it is sent: it calls `record` with the next step until the run has STEPS tool
results, then answers "done after N steps". `record` logs each execution ("start"/"end", the call's idempotency
key, the pid) to the ledger file REINLOOP_BATCH_LEDGER names, flushed and fsynced, so a test can count executions
after a SIGKILL; it sleeps a few random milliseconds, so kills land inside it too. REINLOOP_BATCH_LATENCY is the
model's wait per decision (seconds), REINLOOP_BATCH_STEPS the tool calls per task.

With REINLOOP_BATCH_GATE=DIR, each factory call writes its pid to DIR/factories; a factory called once
REINLOOP_BATCH_WORKERS processes have called it (a worker Ray restarted) waits for DIR/gate to exist, so the test
can read what was saved at the kill before the restarted worker resumes anything (`saved_call_ids`).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent
from reinloop.checkpoint import open_checkpointer
from reinloop.graph import agent_topology
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import idempotency_key


def _log(line: str) -> None:
    ledger = os.environ.get("REINLOOP_BATCH_LEDGER")
    if not ledger:
        return
    with open(ledger, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


@tool
def record(step: int) -> str:
    """Record that a step of the task is done."""
    key = idempotency_key()
    _log(f"start {key} {os.getpid()}")
    time.sleep(random.uniform(0, 0.02))
    _log(f"end {key} {os.getpid()}")
    return f"step {step} recorded"


def _reply(messages: list[BaseMessage]) -> Any:
    steps = int(os.environ.get("REINLOOP_BATCH_STEPS", "2"))
    done = sum(isinstance(message, ToolMessage) for message in messages)
    return tool_call("record", {"step": done + 1}) if done < steps else f"done after {done} steps"


def stepping_agent(checkpointer: Any, rate_limiter: Any | None) -> Any:
    _wait_if_restarted()
    model = ScriptedChatModel(
        respond=_reply,
        latency_s=float(os.environ.get("REINLOOP_BATCH_LATENCY", "0")),
        record=False,
        rate_limiter=rate_limiter,
    )
    config = AgentConfig(max_iterations=10, thread_wait_s=float(os.environ.get("REINLOOP_BATCH_THREAD_WAIT", "0")))
    return build_agent(model, [record], config=config, checkpointer=checkpointer)


def failing_agent(checkpointer: Any, rate_limiter: Any | None) -> Any:
    """A model server that is down: every decision raises."""
    model = ScriptedChatModel(respond=lambda messages: ConnectionError("the model server is down"))
    return build_agent(model, [record], config=AgentConfig(max_iterations=10), checkpointer=checkpointer)


def _wait_if_restarted() -> None:
    gate = os.environ.get("REINLOOP_BATCH_GATE")
    if not gate:
        return
    factories = Path(gate) / "factories"
    earlier = factories.read_text().split() if factories.exists() else []
    with factories.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    if len(earlier) >= int(os.environ.get("REINLOOP_BATCH_WORKERS", "2")):
        while not (Path(gate) / "gate").exists():
            time.sleep(0.05)


def saved_call_ids(db: str, threads: list[str]) -> set[str]:
    """The call ids whose outcome the database holds, in a thread's window or as a saved execute_tool write."""
    saved: set[str] = set()
    with open_checkpointer(db) as saver:
        topology = agent_topology(saver)
        for thread in threads:
            snapshot = topology.get_state({"configurable": {"thread_id": thread}})
            saved |= {m.tool_call_id for m in snapshot.values.get("messages", []) if isinstance(m, ToolMessage)}
            for task in snapshot.tasks:
                if task.name == "execute_tool" and isinstance(task.result, dict):
                    saved |= {outcome["call_id"] for outcome in task.result.get("tool_results", [])}
    return saved
