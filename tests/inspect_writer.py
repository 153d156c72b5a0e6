"""A library process on one thread, for `reinloop inspect`'s tests: a run started from Python (no `reinloop run`
settings in its checkpoints), or a process holding the thread's lease.

Usage: python -m tests.inspect_writer run DB THREAD ROUNDS NAP_S
       python -m tests.inspect_writer hold DB THREAD SECONDS
`run`: the scripted model calls `nap` (which sleeps NAP_S seconds) every round until max_iterations (ROUNDS);
prints "started" once the run holds the thread's lease and has saved a checkpoint, then its finish reason as
JSON. `hold`: holds the thread's lease (`reinloop.lease.hold_thread`) for SECONDS, once it prints "held".
"""

from __future__ import annotations

import itertools
import json
import sys
import time

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool

from reinloop import AgentConfig, build_agent
from reinloop.checkpoint import open_checkpointer
from reinloop.lease import hold_thread
from reinloop.testing import ScriptedChatModel, tool_call

mode, db, thread = sys.argv[1:4]
counted = itertools.count(1)


@tool
def nap(round: int) -> str:
    """Wait a moment, as a slow tool does."""
    time.sleep(float(sys.argv[5]))
    return f"round {round} done"


def respond(messages: list[BaseMessage]) -> AIMessage:
    # A new round number each time: identical calls would be answered from cache, not run.
    return tool_call("nap", {"round": next(counted)})


def run(rounds: int) -> None:
    with open_checkpointer(db) as saver:
        agent = build_agent(ScriptedChatModel(respond=respond), [nap], config=AgentConfig(max_iterations=rounds),
                            checkpointer=saver)  # fmt: skip
        config = {"configurable": {"thread_id": thread}}
        for number, _ in enumerate(agent.stream({"task": "Nap a while."}, config, stream_mode="updates")):
            if number == 0:
                print("started", flush=True)
        print(json.dumps({"finish_reason": agent.get_state(config).values.get("finish_reason")}), flush=True)


def hold(seconds: float) -> None:
    with open_checkpointer(db) as saver, hold_thread(saver, thread, 0):
        print("held", flush=True)
        time.sleep(seconds)


if mode == "run":
    run(int(sys.argv[4]))
else:
    hold(float(sys.argv[4]))
