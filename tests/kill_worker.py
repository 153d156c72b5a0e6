"""A process that runs (or resumes) an agent with side-effecting tools, for the kill -9 sweep.

Usage: python -m tests.kill_worker start|resume DB WORKSPACE THREAD ROUNDS SEED
(DB: a SQLite file or a postgresql:// URL). Every round the scripted model calls three tools at once: the
built-in db_insert and file_write (append), which use idempotency keys, and `notify`, a side effect that is
not idempotent. Every tool run is logged to WORKSPACE/../executions.log ("start"/"end", the call's key),
flushed and fsynced, so the test can count executions and effects after a SIGKILL at any moment. Tools
sleep a few random milliseconds, so kills land inside tools as well as between steps.

With REINLOOP_RACE_GATE=PATH the run waits for that file to exist before it starts, so two resumers race; a
run refused because the thread is busy prints {"busy": true}.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from reinloop import AgentConfig, ThreadBusyError, build_agent
from reinloop.checkpoint import open_checkpointer
from reinloop.testing import ScriptedChatModel, parallel_calls
from reinloop.tools import DbInsertTool, FileWriteTool, idempotency_key
from reinloop.tools.database import Database
from reinloop.tools.files import Workspace

mode, db, workspace_dir, thread, rounds, seed = sys.argv[1:7]
ROUNDS = int(rounds)
WORKSPACE = Workspace(workspace_dir)
LOG = Path(workspace_dir).parent / "executions.log"
NOTIFICATIONS = Path(workspace_dir).parent / "notifications.log"
jitter = random.Random(f"{seed}-{mode}")


def log(path: Path, line: str) -> None:
    with path.open("a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def pause() -> None:
    time.sleep(jitter.uniform(0, 0.02))


class LoggedDbInsert(DbInsertTool):
    def _run(self, table: str, values: dict[str, Any], config: RunnableConfig, **kwargs: Any) -> str:
        log(LOG, f"start {idempotency_key(config)}")
        pause()
        result = super()._run(table, values, config, **kwargs)
        log(LOG, f"end {idempotency_key(config)}")
        return result


class LoggedFileWrite(FileWriteTool):
    def _run(self, path: str, content: str, config: RunnableConfig, mode: str = "overwrite", **kwargs: Any) -> str:
        log(LOG, f"start {idempotency_key(config)}")
        pause()
        result = super()._run(path, content, config, mode, **kwargs)
        log(LOG, f"end {idempotency_key(config)}")
        return result


@tool
def notify(round: int) -> str:
    """Tell the user that a round is done (a side effect that must not happen twice)."""
    key = idempotency_key()
    log(LOG, f"start {key}")
    pause()
    log(NOTIFICATIONS, f"round {round}")
    pause()
    log(LOG, f"end {key}")
    return f"notified round {round}"


notify.metadata = {"reinloop": {"idempotent": False}}  # how a tool declares itself to reinloop


def respond(messages):
    # The reply depends only on the saved window (memory_capacity holds every round), so a new process
    # continues the same script.
    done = sum(isinstance(m, AIMessage) for m in messages)
    if done >= ROUNDS:
        return "all rounds done"
    return parallel_calls(
        [
            ("db_insert", {"table": "notes", "values": {"title": f"r{done}", "body": "x"}}),
            ("file_write", {"path": "log.txt", "content": f"r{done}\n", "mode": "append"}),
            ("notify", {"round": done}),
        ]
    )


with open_checkpointer(db) as saver:
    database = Database(WORKSPACE.root / "agent.sqlite")
    agent = build_agent(
        ScriptedChatModel(respond=respond),
        [LoggedDbInsert(database), LoggedFileWrite(workspace=WORKSPACE), notify],
        config=AgentConfig(memory_capacity=ROUNDS + 2),  # otherwise the default settings
        checkpointer=saver,
    )
    config = {"configurable": {"thread_id": thread}}
    print("ready", flush=True)
    gate = os.environ.get("REINLOOP_RACE_GATE")
    while gate and not Path(gate).exists():  # racing resumers start their runs together
        time.sleep(0.001)
    try:
        result = agent.invoke({"task": "run the rounds"} if mode == "start" else None, config)
    except ThreadBusyError:
        print(json.dumps({"busy": True}), flush=True)
    else:
        print(json.dumps({"finish_reason": result.get("finish_reason")}), flush=True)
