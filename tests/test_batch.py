"""`run_many` and `reinloop batch` in one process, on a real SQLite file: one run per task on its own thread,
results appended as they end, a batch run again skips what is answered and continues what was saved mid-run,
a task that keeps failing ends with its error, the budget stops new runs, bad tasks files are refused."""

from __future__ import annotations

import json
import sqlite3

import pytest
from langchain_core.rate_limiters import InMemoryRateLimiter

from reinloop.batch import (
    ERROR,
    BatchError,
    BatchLimits,
    BatchTask,
    Prices,
    ResultsFile,
    arun_many,
    read_tasks,
    run_many,
    thread_for,
)
from reinloop.checkpoint import aopen_checkpointer
from reinloop.cli import main
from tests import batch_agents

STEPPING = "tests.batch_agents:stepping_agent"


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.log"
    monkeypatch.setenv("REINLOOP_BATCH_LEDGER", str(path))
    return path


def _tasks(count: int) -> list[BatchTask]:
    return [BatchTask(id=f"t{i}", task=f"task number {i}") for i in range(count)]


def _starts(ledger) -> list[str]:
    return [line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("start")]


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_task_runs_once_on_its_own_thread_and_its_result_is_appended(tmp_path, ledger):
    results = tmp_path / "results.jsonl"
    summary = run_many(STEPPING, _tasks(5), db=tmp_path / "runs.sqlite", results=results,
                       limits=BatchLimits(concurrency=3), prices=Prices(1.0, 2.0))  # fmt: skip
    records = _lines(results)
    assert sorted(r["id"] for r in records) == [f"t{i}" for i in range(5)]
    assert {r["finish_reason"] for r in records} == {"answered"}
    assert {r["answer"] for r in records} == {"done after 2 steps"}
    assert {r["thread_id"] for r in records} == {thread_for(f"t{i}") for i in range(5)}
    for record in records:
        usage = record["usage"]
        assert usage["model_calls"] == 3 and usage["total_tokens"] > 0
        expected = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6
        assert record["cost_usd"] == pytest.approx(expected)
    starts = _starts(ledger)
    assert len(starts) == 10 and len(set(starts)) == 10  # two calls a task, each run once
    assert summary.ran == 5 and summary.reasons == {"answered": 5} and summary.skipped == 0
    assert summary.tokens == sum(r["usage"]["total_tokens"] for r in records)
    with sqlite3.connect(tmp_path / "runs.sqlite") as conn:
        threads = {row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    assert threads == {thread_for(f"t{i}") for i in range(5)}


def test_a_batch_run_again_skips_the_answered_tasks(tmp_path, ledger):
    results, db = tmp_path / "results.jsonl", tmp_path / "runs.sqlite"
    run_many(STEPPING, _tasks(3), db=db, results=results)
    again = run_many(STEPPING, _tasks(4), db=db, results=results)
    assert (again.skipped, again.ran) == (3, 1)
    assert sorted(r["id"] for r in _lines(results)) == ["t0", "t1", "t2", "t3"]
    assert len(_starts(ledger)) == 8


async def test_a_thread_saved_mid_run_continues_and_its_saved_calls_do_not_run_again(tmp_path, ledger, monkeypatch):
    """What a dead driver or worker leaves: a thread saved after its first tool call. The batch continues it."""
    db, results = tmp_path / "runs.sqlite", tmp_path / "results.jsonl"
    task = _tasks(1)[0]
    monkeypatch.setenv("REINLOOP_BATCH_STEPS", "3")
    async with aopen_checkpointer(db) as saver:
        agent = batch_agents.stepping_agent(saver, None)
        config = {"configurable": {"thread_id": thread_for(task.id)}}
        # Stop after the first round's tool call is saved (the model would be asked next).
        await agent.ainvoke({"task": task.task}, config, interrupt_before=["decide"])
        await agent.ainvoke(None, config, interrupt_before=["decide"])
        assert (await agent.aget_state(config)).next == ("decide",)
    first = _starts(ledger)
    assert len(first) == 1
    summary = await arun_many(STEPPING, [task], db=db, results=results)
    assert summary.reasons == {"answered": 1}
    starts = _starts(ledger)
    assert starts[0] == first[0] and len(starts) == 3 and len(set(starts)) == 3
    assert _lines(results)[0]["answer"] == "done after 3 steps"


async def test_a_finished_run_whose_result_was_not_written_is_read_back_without_running(tmp_path, ledger):
    db, results = tmp_path / "runs.sqlite", tmp_path / "results.jsonl"
    task = _tasks(1)[0]
    async with aopen_checkpointer(db) as saver:
        done = await batch_agents.stepping_agent(saver, None).ainvoke(
            {"task": task.task}, {"configurable": {"thread_id": thread_for(task.id)}}
        )
    executions = len(_starts(ledger))
    # The failing agent's model raises if asked anything: the result comes from the saved thread.
    await arun_many("tests.batch_agents:failing_agent", [task], db=db, results=results)
    record = _lines(results)[0]
    assert (record["finish_reason"], record["answer"]) == ("answered", done["final_answer"])
    assert len(_starts(ledger)) == executions


def test_a_task_that_keeps_failing_ends_with_its_error_and_is_tried_again_next_time(tmp_path, ledger):
    db, results = tmp_path / "runs.sqlite", tmp_path / "results.jsonl"
    failed = run_many("tests.batch_agents:failing_agent", _tasks(2), db=db, results=results,
                      limits=BatchLimits(attempts=2))  # fmt: skip
    assert failed.reasons == {ERROR: 2}
    records = _lines(results)
    assert {r["finish_reason"] for r in records} == {ERROR}
    assert all(r["attempts"] == 2 and "ConnectionError: the model server is down" in r["error"] for r in records)
    # The same command with the model back: the failed tasks run (their threads continue), the file ends answered.
    fixed = run_many(STEPPING, _tasks(2), db=db, results=results)
    assert (fixed.skipped, fixed.reasons) == (0, {"answered": 2})
    assert {r["finish_reason"] for r in ResultsFile(results).read().values()} == {"answered"}


def test_no_run_starts_once_the_budget_is_spent(tmp_path, ledger):
    results = tmp_path / "results.jsonl"
    summary = run_many(STEPPING, _tasks(5), db=tmp_path / "runs.sqlite", results=results,
                       limits=BatchLimits(concurrency=1, max_tokens=1))  # fmt: skip
    assert (summary.ran, summary.not_started) == (1, 4)
    assert len(_lines(results)) == 1


def test_a_cost_budget_needs_prices(tmp_path):
    with pytest.raises(BatchError, match="prices"):
        run_many(STEPPING, _tasks(1), db=tmp_path / "r.sqlite", results=tmp_path / "r.jsonl",
                 limits=BatchLimits(max_cost_usd=1.0))  # fmt: skip


def test_the_factory_gets_the_rate_limiter(tmp_path):
    given = []

    def factory(checkpointer, rate_limiter):
        given.append(rate_limiter)
        return batch_agents.stepping_agent(checkpointer, rate_limiter)

    run_many(factory, _tasks(1), db=tmp_path / "r.sqlite", results=tmp_path / "r.jsonl",
             limits=BatchLimits(requests_per_second=50))  # fmt: skip
    assert isinstance(given[0], InMemoryRateLimiter)


def test_a_results_line_cut_by_a_crash_is_ignored_and_ended(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a", "finish_reason": "answered"}\n{"id": "b", "fini')
    results = ResultsFile(path)
    assert list(results.read()) == ["a"]
    results.append({"id": "c", "finish_reason": "answered"})
    assert list(results.read()) == ["a", "c"]


def test_the_first_result_makes_the_results_file(tmp_path):
    results = ResultsFile(tmp_path / "new" / "results.jsonl")
    results.append({"id": "a", "finish_reason": "answered"})
    assert (tmp_path / "new" / "results.jsonl").read_text() == '{"id": "a", "finish_reason": "answered"}\n'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"task": "a"}\nnot json\n', r"tasks.jsonl:2: not JSON"),
        ('{"id": 1, "task": "a"}\n{"id": "1", "task": "b"}\n', r"id '1' is already the id of line 1"),
        ('{"id": "x"}\n', r'"task" must be a non-blank string'),
        ('["a"]\n', "must be a JSON object"),
        ('{"id": true, "task": "a"}\n', '"id" must be'),
    ],
)
def test_a_bad_tasks_file_is_refused_naming_the_line(tmp_path, content, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text(content)
    with pytest.raises(BatchError, match=message):
        read_tasks(path)


def test_tasks_without_ids_are_named_by_their_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"task": "a"}\n\n{"task": "b"}\n')
    assert read_tasks(path) == [BatchTask("1", "a"), BatchTask("3", "b")]


def test_the_command_runs_a_batch_and_again_skips_it(tmp_path, ledger, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "task": f"task {i}"}) + "\n" for i in range(3)))
    args = ["batch", str(tasks), "--agent", STEPPING, "--db", str(tmp_path / "runs.sqlite"), "--quiet"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert (summary["ran"], summary["reasons"]) == (3, {"answered": 3})
    results = tmp_path / "tasks.results.jsonl"
    assert sorted(r["id"] for r in _lines(results)) == ["q0", "q1", "q2"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert (summary["ran"], summary["skipped"]) == (0, 3)


def test_the_command_refuses_a_bad_factory_and_a_bad_file(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task": "a"}\n')
    assert main(["batch", str(tasks), "--agent", "tests.batch_agents:nothing", "--db", str(tmp_path / "r.sqlite")]) == 2
    assert "cannot load the agent factory" in capsys.readouterr().err
    tasks.write_text("{")
    assert main(["batch", str(tasks), "--agent", STEPPING]) == 2
    assert "tasks.jsonl:1: not JSON" in capsys.readouterr().err
    tasks.write_text('{"task": "a"}\n')
    assert main(["batch", str(tasks), "--agent", STEPPING, "--prices", "cheap"]) == 2
    assert "--prices takes two numbers" in capsys.readouterr().err


class _Snapshot:
    def __init__(self, values, next=(), interrupts=()):
        self.values, self.next, self.interrupts = values, next, interrupts


class _SavedAgent:
    """An agent whose thread is saved as `snapshot`: what `arun_task` asks it to do is recorded."""

    def __init__(self, snapshot):
        self.snapshot, self.invoked = snapshot, []

    async def aget_state(self, config):
        return self.snapshot

    async def ainvoke(self, input, config):
        self.invoked.append(input)
        return {"task": "t", "final_answer": "ran", "finish_reason": "answered", "iteration": 1}


@pytest.mark.parametrize(
    ("snapshot", "invoked", "reason"),
    [
        # A step whose tasks all saved their writes before the process died: LangGraph shows no next node, but
        # the run has not ended (no finish reason): it continues.
        (_Snapshot({"task": "t", "finish_reason": None}), [None], "answered"),
        (_Snapshot({"task": "t", "finish_reason": "dead_loop"}), [], "dead_loop"),
        (_Snapshot({"task": "t", "finish_reason": "answered"}, next=("circuit_break",)), [None], "answered"),
        (_Snapshot({"task": "t"}, next=("execute_tool",), interrupts=("approve?",)), [], "waiting_for_approval"),
        (_Snapshot({"task": "another task", "finish_reason": "answered"}), [{"task": "t"}], "answered"),
        (_Snapshot({}), [{"task": "t"}], "answered"),
    ],
)
async def test_what_a_saved_thread_asks_of_a_batch(snapshot, invoked, reason):
    from reinloop.batch import arun_task

    agent = _SavedAgent(snapshot)
    record = await arun_task(agent, BatchTask("x", "t"))
    assert (agent.invoked, record["finish_reason"]) == (invoked, reason)


def test_the_budget_counts_what_earlier_runs_of_the_batch_spent(tmp_path, ledger):
    db, results = tmp_path / "runs.sqlite", tmp_path / "results.jsonl"
    first = run_many(STEPPING, _tasks(2), db=db, results=results)
    # The two results written spend more than this budget: run again, the batch starts nothing new.
    again = run_many(STEPPING, _tasks(4), db=db, results=results, limits=BatchLimits(max_tokens=first.tokens))
    assert (again.ran, again.skipped, again.not_started, again.earlier_tokens) == (0, 2, 2, first.tokens)
    more = run_many(STEPPING, _tasks(4), db=db, results=results, limits=BatchLimits(max_tokens=first.tokens + 1))
    assert (more.ran, more.not_started) == (2, 0)


def test_a_driver_killed_mid_batch_is_finished_by_the_same_command(tmp_path, ledger):
    """kill -9 of `reinloop batch` while runs are in flight: the same command again answers every task once,
    and no call whose outcome was saved runs again (a call in flight at the kill may run again with its key)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from collections import Counter

    from tests.test_readme import ROOT

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"k{i}", "task": f"task {i}"}) + "\n" for i in range(12)))
    db, results = tmp_path / "runs.sqlite", tmp_path / "tasks.results.jsonl"
    command = [sys.executable, "-m", "reinloop", "batch", str(tasks), "--agent", STEPPING, "--db", str(db),
               "--concurrency", "4", "--quiet"]  # fmt: skip
    env = {**os.environ, "REINLOOP_BATCH_LATENCY": "0.05", "REINLOOP_BATCH_STEPS": "3", "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (results.exists() and len(results.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and driver.poll() is None, driver.stderr.read() if driver.stderr else ""
        time.sleep(0.005)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    at_kill = len(_starts(ledger))
    saved = batch_agents.saved_call_ids(str(db), [thread_for(f"k{i}") for i in range(12)])
    answered_at_kill = len(ResultsFile(results).read())
    assert answered_at_kill < 12, "the batch ended before the kill"

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    ids = [json.loads(line)["id"] for line in results.read_text().splitlines() if line.strip().endswith("}")]
    assert Counter(ids) == Counter(f"k{i}" for i in range(12))  # every task once
    assert {r["finish_reason"] for r in ResultsFile(results).read().values()} == {"answered"}
    starts = _starts(ledger)
    rerun = [key for key in starts[at_kill:] if key.split("/")[-1] in saved]
    assert rerun == []
    assert len(set(starts)) == 12 * 3
