"""Resume after a circuit break (fresh budget, hint) and after a crash (a killed process)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from reinloop import ConfigurationError, ResumeError, build_agent, resume
from reinloop.checkpoint import open_checkpointer
from reinloop.config import MAX_ITERATIONS
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import THREAD, add, make_agent, new_thread

WORKER = Path(__file__).with_name("crash_worker.py")


@pytest.mark.parametrize(
    ("setup", "config", "error", "message"),
    [
        ("none", {"configurable": {}}, ResumeError, "thread_id"),
        ("none", {"configurable": {"thread_id": "never-ran"}}, ResumeError, "no saved state for thread 'never-ran'"),
        ("answered", THREAD, ResumeError, "already answered"),
        ("broken", {**THREAD, "extra": 0}, ConfigurationError, "extra_iterations must be at least 1"),
        ("broken", {**THREAD, "extra": MAX_ITERATIONS + 1}, ConfigurationError, "at most 1,000,000"),
        ("broken", {**THREAD, "extra": 10**26}, ConfigurationError, "MAX_ITERATIONS"),
    ],
    ids=[
        "no-thread-id",
        "unknown-thread",
        "answered-thread",
        "zero-extra",
        "extra-over-the-limit",
        "extra-past-64-bits",
    ],
)
def test_resume_refuses_what_it_cannot_do(setup, config, error, message):
    # broken: four lookups that fail (the tool raises), a reflection turn at the third, error_streak at the fourth
    broken = [tool_call("lookup", {"key": f"missing_{n}"}) for n in range(4)]
    script = {"none": [], "answered": ["done"], "broken": broken}[setup]
    agent, _ = make_agent(script, max_replans=0)
    if setup != "none":
        stopped = agent.invoke({"task": "t"}, THREAD)
        assert stopped["finish_reason"] == {"answered": "answered", "broken": "error_streak"}[setup]
    config = dict(config)
    extra = config.pop("extra", None)
    with pytest.raises(error, match=message):
        resume(agent, config, extra_iterations=extra)


def test_resume_without_a_checkpointer_is_a_clear_error():
    agent = build_agent(ScriptedChatModel(replies=["x"]), [add])
    with pytest.raises(ResumeError, match="cannot resume thread 'test-thread'"):
        resume(agent, THREAD)


def test_a_paused_thread_continues_where_it_stopped_but_takes_no_hint():
    agent, _ = make_agent([tool_call("add", {"a": 1, "b": 1}), "2"], checkpointer=InMemorySaver())
    agent.invoke({"task": "t"}, THREAD, interrupt_before=["execute_tool"])
    assert agent.get_state(THREAD).next == ("execute_tool",)
    with pytest.raises(ResumeError, match="stopped mid-step"):
        resume(agent, THREAD, hint="hurry")
    assert resume(agent, THREAD)["final_answer"] == "2"


def _saved_outcomes(db: str, thread: dict) -> list[str]:
    """Names of the tools whose outcome is saved as a pending write of the thread's latest checkpoint.

    Only real outcomes count: validate_args also writes tool_results (a reset), and with LangGraph's async
    durability the checkpoint holding that reset can still be the latest one on disk for a moment."""
    with open_checkpointer(db) as saver:
        found = saver.get_tuple(thread)
    writes = [] if found is None else found.pending_writes
    return [
        outcome["name"]
        for _, channel, value in writes
        if channel == "tool_results" and isinstance(value, list)
        for outcome in value
        if isinstance(outcome, dict) and "name" in outcome
    ]


def _wait_for(condition, what: str, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"worker exited early waiting for {what}: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_resume_after_a_crash_inside_a_tool_does_not_rerun_completed_calls(tmp_path, backend, request):
    db = str(tmp_path / "runs.sqlite") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    log, arm = tmp_path / "tools.log", tmp_path / "hang.arm"
    arm.touch()
    args = [sys.executable, str(WORKER)]
    thread = new_thread()
    paths = [db, str(log), str(arm), thread["configurable"]["thread_id"]]
    worker = subprocess.Popen([*args, "start", *paths], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # killed inside slow_step, after its sibling call record(2) has finished and been saved
    _wait_for(lambda: arm.with_suffix(".entered").exists(), "slow_step to start", worker)
    _wait_for(lambda: _saved_outcomes(db, thread) == ["record"], "record(2) to be saved", worker)
    worker.kill()
    worker.wait()
    assert sorted(log.read_text().splitlines()) == ["record 1", "record 2", "slow 3"]

    arm.unlink()
    done = subprocess.run([*args, "resume", *paths], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "final_answer": "all steps done",
        "finish_reason": "answered",
    }
    runs = log.read_text().splitlines()
    assert runs.count("record 1") == 1 and runs.count("record 2") == 1  # completed calls were not run again
    assert runs.count("slow 3") == 2  # the call that was cut off ran again, to completion


def test_a_long_resume_budget_is_not_cut_short_by_langgraphs_recursion_limit():
    summaries = ScriptedChatModel(respond=lambda messages: "summary")
    script = [tool_call("add", {"a": i, "b": 0}) for i in range(60)] + ["done"]
    agent, _ = make_agent(script, max_iterations=3, summary_model=summaries)
    agent.invoke({"task": "t"}, THREAD)
    # 57 more rounds are far more LangGraph steps than a 3-round agent needs
    result = resume(agent, THREAD, extra_iterations=100)
    assert (result["finish_reason"], result["iteration"]) == ("answered", 61)


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("input", [None, Command(resume="yes")], ids=["none", "command"])
async def test_continuing_a_thread_that_was_never_saved_is_a_resume_error_naming_it(saver, how, input):
    if how == "ainvoke" and not isinstance(saver, InMemorySaver):
        pytest.skip("SqliteSaver runs sync only; AsyncSqliteSaver is tested in test_lease")
    agent = build_agent(ScriptedChatModel(), [add], checkpointer=saver)
    thread = {"configurable": {"thread_id": "never-ran"}}
    with pytest.raises(ResumeError, match="thread 'never-ran' has no saved state to continue"):
        if how == "invoke":
            agent.invoke(input, thread)
        else:
            await agent.ainvoke(input, thread)
    assert list(saver.list(thread)) == []
