"""One writer per thread (`reinloop.lease`): while a run writes a thread, another run of it is refused with
ThreadBusyError (or waits, with thread_wait_s), in this process and from another, on every saver; a lease
left by a killed process is taken over."""

from __future__ import annotations

import asyncio
import contextvars
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from reinloop import AgentConfig, ThreadBusyError, build_agent
from reinloop.checkpoint import open_checkpointer
from reinloop.lease import LEASES_TABLE, _PostgresLease, ahold_thread, hold_thread
from reinloop.state import AgentState
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import add, new_thread

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def database(request, tmp_path):
    """What the agent saves to: a saver in memory, a SQLite file, the test PostgreSQL database."""
    if request.param == "memory":
        return None
    return str(tmp_path / "runs.sqlite") if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def open_saver(database):
    if database is None:
        return _Kept(InMemorySaver())
    return open_checkpointer(database)


class _Kept:
    def __init__(self, saver):
        self.saver = saver

    def __enter__(self):
        return self.saver

    def __exit__(self, *exc):
        return None


def respond(messages):
    """Call the gate once, then answer."""
    if any(isinstance(m, ToolMessage) for m in messages):
        return "done"
    return tool_call("hang", {"seconds": 1})


def gated_agent(saver, gate, **config):
    model = ScriptedChatModel(respond=respond)
    return build_agent(
        model, [gate.tool, add], config=AgentConfig(tool_timeout_s=30, **config), checkpointer=saver
    ), model


def in_background(call):
    """Run `call` in a thread; returns the thread and a list that gets its result or exception."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_second_run_of_a_thread_while_one_runs_is_refused_and_changes_nothing(database, gate):
    with open_saver(database) as saver:
        agent, _ = gated_agent(saver, gate)
        other, other_model = gated_agent(saver, gate)
        thread = new_thread()
        runner, outcome = in_background(lambda: agent.invoke({"task": "wait"}, thread))
        assert gate.entered.wait(10)
        saved = len(list(saver.list(thread)))
        for second in ({"task": "another"}, None):
            with pytest.raises(ThreadBusyError, match="is being run by another"):
                other.invoke(second, thread)
        with pytest.raises(ThreadBusyError):
            other.update_state(thread, {"iterations_left": 99})
        assert other_model.calls == []
        assert len(list(saver.list(thread))) == saved
        gate.released.set()
        runner.join(10)
        assert outcome[0]["finish_reason"] == "answered"
        # The lease is given back: the thread takes a new task.
        gate.entered.clear()
        assert other.invoke({"task": "again"}, thread)["finish_reason"] == "answered"


def test_a_run_built_to_wait_for_its_thread_runs_once_the_other_run_ends(database, gate):
    with open_saver(database) as saver:
        agent, _ = gated_agent(saver, gate)
        patient, _ = gated_agent(saver, gate, thread_wait_s=20)
        thread = new_thread()
        first, first_outcome = in_background(lambda: agent.invoke({"task": "wait"}, thread))
        assert gate.entered.wait(10)
        second, second_outcome = in_background(lambda: patient.invoke({"task": "next"}, thread))
        time.sleep(0.3)
        assert second_outcome == []  # still waiting
        gate.released.set()
        first.join(10)
        second.join(20)
        assert first_outcome[0]["finish_reason"] == second_outcome[0]["finish_reason"] == "answered"
        tasks = [snapshot.values.get("task") for snapshot in agent.get_state_history(thread)]
        assert tasks[0] == "next" and "wait" in tasks  # one history: the second run continued the first's


def test_runs_of_different_threads_do_not_wait_for_each_other(database, gate):
    with open_saver(database) as saver:
        agent, _ = gated_agent(saver, gate)
        runner, outcome = in_background(lambda: agent.invoke({"task": "wait"}, new_thread()))
        assert gate.entered.wait(10)
        model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2}), "3"])
        free = build_agent(model, [add], checkpointer=saver)
        assert free.invoke({"task": "add"}, new_thread())["final_answer"] == "3"
        gate.released.set()
        runner.join(10)
        assert outcome[0]["finish_reason"] == "answered"


def test_the_lease_is_given_back_when_a_run_fails(tmp_path):
    with open_checkpointer(tmp_path / "runs.sqlite") as saver:
        failing = build_agent(ScriptedChatModel(replies=[RuntimeError("model down")]), [add], checkpointer=saver)
        thread = new_thread()
        with pytest.raises(RuntimeError, match="model down"):
            failing.invoke({"task": "add"}, thread)
        with sqlite3.connect(tmp_path / "runs.sqlite") as conn:
            assert conn.execute(f"SELECT count(*) FROM {LEASES_TABLE}").fetchone() == (0,)
        working = build_agent(ScriptedChatModel(replies=["3"]), [add], checkpointer=saver)
        assert working.invoke({"task": "add"}, thread)["final_answer"] == "3"


def test_an_agent_run_as_a_subgraph_leaves_its_thread_to_the_parents_run(tmp_path):
    with open_checkpointer(tmp_path / "runs.sqlite") as saver:
        inner = build_agent(ScriptedChatModel(replies=["inside"]), [add], checkpointer=saver)
        parent = StateGraph(AgentState)
        parent.add_node("agent", inner)
        parent.add_edge(START, "agent")
        assert parent.compile(checkpointer=saver).invoke({"task": "go"}, new_thread())["final_answer"] == "inside"


HOLDER = """
import sys
from reinloop.checkpoint import open_checkpointer
from reinloop.lease import hold_thread
with open_checkpointer(sys.argv[1]) as saver, hold_thread(saver, sys.argv[2], 0):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_lease_held_by_another_process_refuses_and_is_taken_over_once_that_process_is_killed(
    database, tmp_path, reaped
):
    if database is None:
        pytest.skip("a saver in memory is one process's")
    thread = f"t-{time.time_ns()}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, database, thread],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with open_checkpointer(database) as saver:
            with (
                pytest.raises(ThreadBusyError, match=f"{thread!r} is being run by another process"),
                hold_thread(saver, thread, 0),
            ):
                pass
            holder.send_signal(signal.SIGKILL)
            if reaped:
                holder.wait(10)
            else:
                _wait_for_zombie(holder.pid)
            # PostgreSQL ends the killed process's session, and its lock, once it sees the connection drop.
            with hold_thread(saver, thread, 10):
                pass
    finally:
        holder.kill()
        holder.wait(10)


def _wait_for_zombie(pid):
    for _ in range(500):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not die")


async def test_a_second_async_run_of_a_thread_is_refused(tmp_path, gate):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "runs.sqlite")) as saver:
        agent, _ = gated_agent(saver, gate)
        thread = new_thread()
        first = asyncio.create_task(agent.ainvoke({"task": "wait"}, thread))
        while not gate.entered.is_set():
            await asyncio.sleep(0.01)
        with pytest.raises(ThreadBusyError):
            await agent.ainvoke(None, thread)
        gate.released.set()
        assert (await first)["finish_reason"] == "answered"
        gate.entered.clear()
        assert (await agent.ainvoke({"task": "again"}, thread))["finish_reason"] == "answered"


async def test_postgres_savers_on_a_connection_a_pool_and_async_share_a_threads_lease(postgres_url):
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    thread = f"t-{time.time_ns()}"
    pool = ConnectionPool(postgres_url, kwargs={"autocommit": True, "row_factory": dict_row}, open=True)
    async with AsyncPostgresSaver.from_conn_string(postgres_url) as asynchronous:
        with pool, open_checkpointer(postgres_url) as connected:
            pooled = PostgresSaver(pool)
            for holder, other in [(connected, pooled), (pooled, connected)]:
                with hold_thread(holder, thread, 0):
                    with pytest.raises(ThreadBusyError, match="database session"), hold_thread(other, thread, 0):
                        pass
                    with pytest.raises(ThreadBusyError):
                        async with ahold_thread(asynchronous, thread, 0):
                            pass
            async with ahold_thread(asynchronous, thread, 0):
                with pytest.raises(ThreadBusyError), hold_thread(connected, thread, 0):
                    pass
            with hold_thread(connected, thread, 0), hold_thread(connected, f"{thread}-other", 0):
                pass  # other threads are free


async def test_many_async_runs_on_postgres_hold_their_leases_on_one_session(postgres_url, monkeypatch):
    """An async saver's runs take their threads' advisory locks on one session of the process's own, not one
    connection each: a batch of hundreds of runs at once needs two connections a process, not hundreds."""
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from tests.batch_agents import stepping_agent

    def sessions() -> int:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        return int(row[0])

    monkeypatch.setenv("REINLOOP_BATCH_LATENCY", "0.3")
    before = sessions()
    async with AsyncPostgresSaver.from_conn_string(postgres_url) as saver:
        agent = stepping_agent(saver, None)
        threads = [f"many-{time.time_ns()}-{n}" for n in range(30)]
        runs = [asyncio.ensure_future(agent.ainvoke({"task": "t"}, {"configurable": {"thread_id": thread}}))
                for thread in threads]  # fmt: skip
        await asyncio.sleep(0.4)  # every run holds its lease, waiting on the model
        during = sessions()
        # And the locks hold for any other session.
        keys = [_PostgresLease(None, thread).key for thread in threads]
        with psycopg.connect(postgres_url, autocommit=True) as other:
            taken = [other.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0] for key in keys]
        assert not any(taken)
        done = await asyncio.gather(*runs)
    assert {out["finish_reason"] for out in done} == {"answered"}
    assert during - before <= 2  # the saver's connection and the lease session


def test_a_run_s_end_moves_the_sqlite_wal_into_the_database(tmp_path):
    from reinloop import sqlite_checkpointer

    path = tmp_path / "runs.sqlite"
    saver = sqlite_checkpointer(path)
    replies = [tool_call("add", {"a": n, "b": 1}) for n in range(20)] + ["done"]
    agent = build_agent(ScriptedChatModel(replies=replies), [add], checkpointer=saver)
    thread = new_thread()
    assert agent.invoke({"task": "t"}, thread)["finish_reason"] == "answered"
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # truncated: every step is in the database file
    assert len(list(saver.list(thread))) > 100  # and nothing was lost
    saver.conn.close()


def test_an_async_run_s_end_moves_the_sqlite_wal_into_the_database(tmp_path):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "runs.sqlite"
    replies = [tool_call("add", {"a": n, "b": 1}) for n in range(20)] + ["done"]

    async def run() -> int:
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            agent = build_agent(ScriptedChatModel(replies=replies), [add], checkpointer=saver)
            thread = new_thread()
            assert (await agent.ainvoke({"task": "t"}, thread))["finish_reason"] == "answered"
            wal = path.with_name(path.name + "-wal")
            assert not wal.exists() or wal.stat().st_size == 0
            return len([c async for c in saver.alist(thread)])

    assert asyncio.run(run()) > 100


# a fresh SQLite file: the saver is set up before any lease transaction --------------------------------------


def _agent_on(saver):
    def respond(messages):
        done = sum(isinstance(message, ToolMessage) for message in messages)
        return tool_call("add", {"a": done, "b": 1}) if done < 2 else "done"

    return build_agent(ScriptedChatModel(respond=respond), [add], checkpointer=saver)


def test_concurrent_first_runs_on_a_fresh_sqlite_file_set_the_saver_up_before_any_lease(tmp_path, monkeypatch):
    # SQLite refuses the saver's switch to WAL at once while another connection holds a transaction; before the
    # fix, a lease taken beside a run's first read failed about half of ten concurrent first runs.
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    import reinloop.lease as lease

    set_up_at_take: list[bool] = []
    original = lease._SqliteLease.take
    savers: list = []

    def take(self):
        set_up_at_take.append(savers[-1].is_setup)
        return original(self)

    monkeypatch.setattr(lease._SqliteLease, "take", take)

    async def many() -> list[dict]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "async.sqlite")) as saver:
            savers.append(saver)
            agent = _agent_on(saver)
            return await asyncio.gather(*(agent.ainvoke({"task": "add"}, new_thread()) for _ in range(10)))

    assert [result["finish_reason"] for result in asyncio.run(many())] == ["answered"] * 10
    with SqliteSaver.from_conn_string(str(tmp_path / "sync.sqlite")) as saver:
        savers.append(saver)
        agent = _agent_on(saver)
        results: list[dict] = []
        threads = [threading.Thread(target=lambda: results.append(agent.invoke({"task": "add"}, new_thread())))
                   for _ in range(4)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [result["finish_reason"] for result in results] == ["answered"] * 4
    assert len(set_up_at_take) == 14 and all(set_up_at_take)


def test_a_held_thread_is_written_by_the_block_s_runs_and_refused_to_any_other_writer(database, gate):
    with open_saver(database) as saver:
        agent, _ = gated_agent(saver, gate)
        thread = new_thread()
        gate.released.set()
        with agent.hold(thread):
            # The runs and updates inside the block share its lease instead of finding the thread busy.
            assert agent.invoke({"task": "wait"}, thread)["finish_reason"] == "answered"
            agent.update_state(thread, {"iterations_left": 5})
            # A run from another thread of this process is outside the block: refused, nothing saved.
            saved = len(list(saver.list(thread)))
            runner, outcome = in_background(lambda: agent.invoke({"task": "again"}, thread))
            runner.join(10)
            assert isinstance(outcome[0], ThreadBusyError)
            assert len(list(saver.list(thread))) == saved
        # The block gave it back.
        runner, outcome = in_background(lambda: agent.invoke({"task": "again"}, thread))
        runner.join(10)
        assert outcome[0]["finish_reason"] == "answered"


async def test_an_async_held_thread_is_written_by_the_block_s_runs_and_refused_to_any_other_writer(tmp_path, gate):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "runs.sqlite")) as saver:
        agent, _ = gated_agent(saver, gate)
        thread = new_thread()
        gate.released.set()
        async with agent.ahold(thread):
            assert (await agent.ainvoke({"task": "wait"}, thread))["finish_reason"] == "answered"
            # A task of its own context, not a copy of the block's, is another writer.
            other = asyncio.create_task(agent.ainvoke({"task": "again"}, thread), context=contextvars.Context())
            with pytest.raises(ThreadBusyError):
                await other
        assert (await agent.ainvoke({"task": "again"}, thread))["finish_reason"] == "answered"


def test_resume_holds_the_thread_from_its_read_to_the_end_of_the_run(tmp_path, monkeypatch):
    from reinloop import resume

    resume_module = sys.modules["reinloop.resume"]  # the package's `resume` is the function
    with open_checkpointer(str(tmp_path / "runs.sqlite")) as saver:
        model = ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": len(messages), "b": 1}))
        agent = build_agent(model, [add], checkpointer=saver, config=AgentConfig(max_iterations=1))
        thread = new_thread()
        assert agent.invoke({"task": "count"}, thread)["finish_reason"] == "max_iterations"
        held = []
        prepare = resume_module.prepare_resume

        def spying(*args, **kwargs):
            # Another writer, between the read of the thread and its run, finds it busy.
            runner, outcome = in_background(lambda: agent.update_state(thread, {"iterations_left": 9}))
            runner.join(10)
            held.append(isinstance(outcome[0], ThreadBusyError))
            return prepare(*args, **kwargs)

        monkeypatch.setattr(resume_module, "prepare_resume", spying)
        assert resume(agent, thread, extra_iterations=2)["finish_reason"] == "max_iterations"
        assert held == [True]
