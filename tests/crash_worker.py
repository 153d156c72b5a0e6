"""A process that runs (or resumes) an agent on a SQLite checkpoint, for the crash-resume test.

Usage: python crash_worker.py start|resume DB LOG ARM THREAD   (DB: a SQLite file, or a postgresql:// URL)
Every tool run is appended to LOG. While the file ARM exists, `slow_step` announces itself by creating
ARM.entered and then hangs, so the test can kill the process inside a tool.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent
from reinloop.checkpoint import open_checkpointer
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call

mode, db, log, arm = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
THREAD = {"configurable": {"thread_id": sys.argv[5]}}


def note(line: str) -> None:
    with log.open("a") as handle:
        handle.write(line + "\n")


@tool
def record(step: int) -> str:
    """Record that a step ran."""
    note(f"record {step}")
    return f"recorded {step}"


@tool
def slow_step(step: int) -> str:
    """A step that takes a while."""
    note(f"slow {step}")
    if arm.exists():
        arm.with_suffix(".entered").touch()
        threading.Event().wait()  # hangs until the test kills this process
    return f"slow {step} done"


SCRIPT = [
    tool_call("record", {"step": 1}),
    parallel_calls([("record", {"step": 2}), ("slow_step", {"step": 3})]),
    "all steps done",
]


def respond(messages):
    # The reply depends only on the saved window, so a new process continues the same script.
    return SCRIPT[sum(isinstance(m, AIMessage) for m in messages)]


def run(saver) -> None:
    agent = build_agent(
        ScriptedChatModel(respond=respond, max_calls=3),
        [record, slow_step],
        config=AgentConfig(tool_timeout_s=120),
        checkpointer=saver,
    )
    result = agent.invoke({"task": "run the steps"} if mode == "start" else None, THREAD)
    print(json.dumps({"final_answer": result.get("final_answer"), "finish_reason": result.get("finish_reason")}))


with open_checkpointer(db) as saver:
    run(saver)
