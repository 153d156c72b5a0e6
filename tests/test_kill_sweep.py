"""kill -9 at random moments, then resume: nothing lost, nothing that was saved runs again, no effect twice.

Each run starts tests/kill_worker.py in a subprocess (default settings: durability, tools, breakers),
kills it with SIGKILL at a random moment, reads what the checkpointer saved, resumes in a new process, and
checks the ledger of side effects and that the thread's history never forked. The races resume in two
processes at once. CI runs a sample; REINLOOP_KILL_RUNS=100 (SQLite), REINLOOP_KILL_RUNS_POSTGRES=30 and
REINLOOP_RACES=20 give the long sweep.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

from reinloop.checkpoint import open_checkpointer
from reinloop.graph import agent_topology
from reinloop.memory.window import pairing_violations

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 6
SQLITE_RUNS = int(os.environ.get("REINLOOP_KILL_RUNS", "6"))
POSTGRES_RUNS = int(os.environ.get("REINLOOP_KILL_RUNS_POSTGRES", "3"))
# A run of ROUNDS rounds takes well under this once the worker is ready; kills fall anywhere inside it.
KILL_WINDOW_S = 1.2


def _worker(mode: str, db: str, folder: Path, thread: str, seed: int, gate: Path | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "tests.kill_worker", mode, db, str(folder / "workspace"), thread, str(ROUNDS)]
    env = {**os.environ, "REINLOOP_RACE_GATE": str(gate)} if gate else None
    return subprocess.Popen(
        [*args, str(seed)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _resume(db: str, folder: Path, thread: str, seed: int, resumers: int, mode: str = "resume") -> list[dict]:
    """Resume the thread in `resumers` processes at once (their runs start together); what each printed. A thread
    killed before its first checkpoint has nothing to resume: its task is started again (`mode` "start")."""
    gate = folder / "gate"
    workers = [_worker(mode, db, folder, thread, seed, gate if resumers > 1 else None) for _ in range(resumers)]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read() if worker.stderr else ""
    gate.touch()
    outcomes = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        outcomes.append(json.loads(out.splitlines()[-1]))
    return outcomes


def _forks(db: str, thread: str) -> list[str]:
    """Checkpoints of the thread that more than one checkpoint continues: where its history forked."""
    with open_checkpointer(db) as saver:
        history = list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
    parents = Counter(item.parent_config["configurable"]["checkpoint_id"] for item in history if item.parent_config)
    return [checkpoint for checkpoint, children in parents.items() if children > 1]


def _saved_outcomes(db: str, thread: str) -> tuple[set[str], dict]:
    """Call ids whose outcome the checkpointer holds (in the window, or as a finished task's saved write)."""
    with open_checkpointer(db) as saver:
        snapshot = agent_topology(saver).get_state({"configurable": {"thread_id": thread}})
    saved = {m.tool_call_id for m in snapshot.values.get("messages", []) if isinstance(m, ToolMessage)}
    for task in snapshot.tasks:
        # A finished execute_tool task whose write is saved; other tasks (validate_args resets the channel
        # with an Overwrite) hold no outcomes.
        if task.name == "execute_tool" and isinstance(task.result, dict):
            saved.update(outcome["call_id"] for outcome in task.result.get("tool_results", []))
    return saved, snapshot.values


def _wait_for_tool_runs(log: Path, started: int) -> None:
    deadline = time.monotonic() + 60
    while sum(1 for event, _ in _executions(log) if event == "start") < started:
        assert time.monotonic() < deadline, f"the worker started fewer than {started} tool runs in 60 s"
        time.sleep(0.002)


def _executions(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines() if line]


def _sweep_once(db: str, tmp_path: Path, seed: int, resumers: int = 1) -> dict:
    folder = tmp_path / f"run-{seed}"
    folder.mkdir()
    thread = f"kill-{seed}-{uuid.uuid4().hex[:8]}"
    log = folder / "executions.log"

    worker = _worker("start", db, folder, thread, seed)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "ready", worker.stderr.read() if worker.stderr else ""
    if resumers == 1:
        time.sleep(random.Random(seed).uniform(0, KILL_WINDOW_S))
    else:  # a race needs a thread left to resume: the kill falls after a random number of tool runs
        _wait_for_tool_runs(log, random.Random(seed).randint(1, 3 * ROUNDS - 3))
    worker.send_signal(signal.SIGKILL)
    _, stderr = worker.communicate(timeout=30)
    killed = worker.returncode == -signal.SIGKILL
    if not killed:
        assert worker.returncode == 0, stderr

    at_kill = _executions(log)
    before_resume = len(at_kill)
    started = [key for event, key in at_kill if event == "start"]
    inside_tool = len(started) - sum(1 for event, _ in at_kill if event == "end")
    saved, values_at_kill = _saved_outcomes(db, thread)
    outcomes = []
    if not values_at_kill:  # killed before the run saved anything (a loaded machine): no tool can have run
        assert at_kill == []
        outcomes = _resume(db, folder, thread, seed, resumers, mode="start")
    elif values_at_kill.get("finish_reason") != "answered":
        outcomes = _resume(db, folder, thread, seed, resumers)

    with open_checkpointer(db) as saver:
        final = agent_topology(saver).get_state({"configurable": {"thread_id": thread}})
    values = final.values
    messages = values["messages"]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    rerun = [key for event, key in _executions(log)[before_resume:] if event == "start" and key.split("/")[-1] in saved]

    # 100% answered, no call lost, every call paired with one result; one history: no step ran twice.
    assert values["finish_reason"] == "answered"
    assert _forks(db, thread) == []
    assert {"finish_reason": "answered"} in outcomes or not outcomes, outcomes
    assert len(outcomes) == resumers or resumers == 1, "the race had no thread left to resume"
    assert pairing_violations(messages) == []
    assert len(results) == 3 * ROUNDS
    # No call whose outcome was saved ran again.
    assert rerun == []
    # db_insert and file_write: every effect exactly once.
    with sqlite3.connect(folder / "workspace" / "agent.sqlite") as conn:
        titles = sorted(row[0] for row in conn.execute("SELECT title FROM notes"))
    assert titles == sorted(f"r{i}" for i in range(ROUNDS))
    assert (folder / "workspace" / "log.txt").read_text().splitlines() == [f"r{i}" for i in range(ROUNDS)]
    # notify (not idempotent): at most once per round; a round whose call was in flight is reported in doubt.
    notifications = folder / "notifications.log"
    notified = notifications.read_text().splitlines() if notifications.exists() else []
    assert len(notified) == len(set(notified))
    in_doubt = {call["call_id"] for call in values.get("in_doubt", [])}
    unknown = {m.tool_call_id for m in results if "outcome of this 'notify' call is unknown" in m.text}
    assert unknown == in_doubt
    assert len(notified) + len(in_doubt) >= ROUNDS
    reran_unsaved = sum(1 for event, key in _executions(log)[before_resume:] if event == "start" and key in started)
    return {
        "resumers_refused": sum(1 for outcome in outcomes if outcome.get("busy")),
        "killed": int(killed),
        "killed_before_a_checkpoint": int(not values_at_kill),
        "killed_inside_a_tool": int(inside_tool > 0),
        "unsaved_calls_run_again": reran_unsaved,
        "in_doubt": len(in_doubt),
    }


@pytest.fixture(scope="module")
def tally():
    """Sums of the runs' figures, printed at the end (pytest -s shows them)."""
    totals: dict[str, dict[str, int]] = {}
    yield totals
    for saver, figures in totals.items():
        print(f"\nkill sweep, {saver}: " + ", ".join(f"{name} {value}" for name, value in figures.items()))


def _add(tally: dict, saver: str, figures: dict) -> None:
    totals = tally.setdefault(saver, {"runs": 0})
    totals["runs"] += 1
    for name, value in figures.items():
        totals[name] = totals.get(name, 0) + value


@pytest.mark.parametrize("seed", range(SQLITE_RUNS))
def test_kill_sweep_sqlite(tmp_path, seed, tally):
    _add(tally, "sqlite", _sweep_once(str(tmp_path / "runs.sqlite"), tmp_path, seed))


@pytest.mark.parametrize("seed", range(POSTGRES_RUNS))
def test_kill_sweep_postgres(postgres_url, tmp_path, seed, tally):
    _add(tally, "postgres", _sweep_once(postgres_url, tmp_path, 10_000 + seed))


# Two processes resume the killed thread at once: one runs it, the other is refused (ThreadBusyError) or, if
# it starts after the first has finished, finds nothing left to run. REINLOOP_RACES=20 gives the long run.
RACES = int(os.environ.get("REINLOOP_RACES", "3"))


@pytest.mark.parametrize("seed", range(RACES))
def test_two_resumers_of_a_killed_thread_on_sqlite_run_each_step_once(tmp_path, seed, tally):
    _add(tally, "sqlite, two resumers", _sweep_once(str(tmp_path / "runs.sqlite"), tmp_path, 20_000 + seed, 2))


@pytest.mark.parametrize("seed", range(RACES))
def test_two_resumers_of_a_killed_thread_on_postgres_run_each_step_once(postgres_url, tmp_path, seed, tally):
    _add(tally, "postgres, two resumers", _sweep_once(postgres_url, tmp_path, 30_000 + seed, 2))
