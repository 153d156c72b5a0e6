"""A batch on a local Ray cluster of two worker processes, saved on a real PostgreSQL: one worker is killed with
SIGKILL mid-batch; Ray restarts it and retries its runs, which continue from their checkpoints. Every task is
answered once in the results file, and no tool call whose outcome was saved at the kill runs again.

CI runs 12 tasks; REINLOOP_RAY_TASKS=200 gives a larger sweep.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")

from reinloop.batch import BatchLimits, BatchTask, ResultsFile, thread_for  # noqa: E402
from reinloop.batch_ray import run_many_on_ray  # noqa: E402
from tests.batch_agents import saved_call_ids  # noqa: E402

TASKS = int(os.environ.get("REINLOOP_RAY_TASKS", "12"))
STEPS = 3


def _executions(ledger) -> list[tuple[str, str, str]]:
    if not ledger.exists():
        return []
    return [tuple(line.split()) for line in ledger.read_text().splitlines() if line.count(" ") == 2]


def test_a_worker_killed_mid_batch_loses_no_task_and_reruns_no_saved_call(postgres_url, tmp_path, monkeypatch):
    ledger, gate = tmp_path / "ledger.log", tmp_path / "gate"
    gate.mkdir()
    prefix = f"ray-{os.getpid()}-{time.time_ns()}:"
    for name, value in {"REINLOOP_BATCH_LEDGER": ledger, "REINLOOP_BATCH_GATE": gate, "REINLOOP_BATCH_WORKERS": 2,
                        "REINLOOP_BATCH_STEPS": STEPS, "REINLOOP_BATCH_LATENCY": 0.05,
                        "REINLOOP_BATCH_THREAD_WAIT": 30}.items():  # fmt: skip
        monkeypatch.setenv(name, str(value))
    tasks = [BatchTask(id=f"t{i}", task=f"task {i}") for i in range(TASKS)]
    threads = [thread_for(task.id, prefix) for task in tasks]
    handles: list = []
    kill: dict = {}

    def killer() -> None:
        while not handles:
            time.sleep(0.01)
        victim = ray.get(handles[0].pid.remote())
        # Kill once the victim has run a few tool calls: mid-batch, some of its runs saved mid-way.
        while sum(1 for _, _, pid in _executions(ledger) if pid == str(victim)) < 4:
            time.sleep(0.005)
        os.kill(victim, signal.SIGKILL)
        kill["pid"], kill["at"] = str(victim), len(_executions(ledger))
        # The restarted worker waits at its gate: what was saved at the kill is read before anything resumes.
        time.sleep(0.2)
        kill["saved"] = saved_call_ids(postgres_url, threads)
        (gate / "gate").touch()

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    results = tmp_path / "results.jsonl"
    summary = run_many_on_ray("tests.batch_agents:stepping_agent", tasks, db=postgres_url, results=results,
                              limits=BatchLimits(concurrency=8), workers=2, per_worker=4, prefix=prefix,
                              on_workers=handles.extend)  # fmt: skip
    watcher.join(timeout=60)
    assert "saved" in kill, "the worker was not killed"

    records = [json.loads(line) for line in results.read_text().splitlines()]
    # Every task answered, once.
    assert Counter(r["id"] for r in records) == Counter(task.id for task in tasks)
    assert {r["finish_reason"] for r in records} == {"answered"}, records
    assert {r["answer"] for r in records} == {f"done after {STEPS} steps"}
    assert summary.reasons == {"answered": TASKS}
    assert set(ResultsFile(results).read()) == {task.id for task in tasks}
    # The killed worker was restarted and ran some of the rest.
    workers = {r["worker"] for r in records}
    assert len(workers) >= 2
    executions = _executions(ledger)
    starts = Counter(key for event, key, _ in executions if event == "start")
    assert len(starts) == TASKS * STEPS  # every call ran at least once
    twice = {key for key, count in starts.items() if count > 1}
    # A call ran again only if the killed worker was running it and its outcome was not saved at the kill.
    first_by: dict[str, str] = {}
    for event, key, pid in executions:
        if event == "start":
            first_by.setdefault(key, pid)
    for key in twice:
        assert first_by[key] == kill["pid"], f"{key} ran twice but was not the killed worker's"
        assert key.split("/")[-1] not in kill["saved"], f"{key}: its outcome was saved, and it ran again"
    assert starts.most_common(1)[0][1] <= 2
