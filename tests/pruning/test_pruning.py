"""A bounded runs database: `reinloop.prune` and `reinloop mark` on real SQLite and PostgreSQL databases."""

import sqlite3
from typing import Annotated, TypedDict

import pytest
from langchain_core.tools import tool
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from reinloop import (
    AgentConfig,
    ConfigurationError,
    PruneError,
    build_agent,
    mark,
    marks,
    prune,
    resume,
    sqlite_checkpointer,
    unmark,
)
from reinloop.checkpoint import is_postgres_url, open_checkpointer
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from tests.cli.test_cli import cli, home  # noqa: F401 - the CLI tests' fixture and helper
from tests.conftest import add, new_thread

ROUNDS = 4


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path):
    """A SQLite file, then the test PostgreSQL database (skipped where none runs)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite")
    return request.getfixturevalue("postgres_url")


def agent_on(saver, replies, tools=(add,), **config):
    model = ScriptedChatModel(replies=list(replies))
    summaries = ScriptedChatModel(respond=lambda messages: "Earlier: additions.")
    return build_agent(model, list(tools), config=AgentConfig(**config), checkpointer=saver, summary_model=summaries)


def broken_run(saver, rounds=ROUNDS):
    """A thread that ran `rounds` rounds of distinct additions and stopped at max_iterations."""
    thread = new_thread()
    script = [tool_call("add", {"a": n, "b": 1}) for n in range(rounds)]
    stopped = agent_on(saver, script, max_iterations=rounds).invoke({"task": "count"}, thread)
    assert stopped["finish_reason"] == "max_iterations"
    return thread


def ids(agent, thread):
    """The thread's checkpoint ids as `get_state_history` lists them, newest first."""
    return [snapshot.config["configurable"]["checkpoint_id"] for snapshot in agent.get_state_history(thread)]


def at(thread, checkpoint_id):
    return {"configurable": {**thread["configurable"], "checkpoint_id": checkpoint_id}}


def rows(db, table, thread):
    """Rows of `table` for the thread, read by SQL, beside the saver."""
    if is_postgres_url(db):
        import psycopg

        with psycopg.connect(db) as conn:
            return conn.execute(f"SELECT * FROM {table} WHERE thread_id = %s", (thread,)).fetchall()
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT * FROM {table} WHERE thread_id = ?", (thread,)).fetchall()


def writes_table(db):
    return "checkpoint_writes" if is_postgres_url(db) else "writes"


def test_prune_keeps_the_latest_checkpoints_and_the_thread_resumes(database):
    with open_checkpointer(database) as saver:
        thread = broken_run(saver)
        agent = agent_on(saver, ["done"], max_iterations=ROUNDS)
        before, history = agent.get_state(thread), ids(agent, thread)

        report = prune(saver, thread["configurable"]["thread_id"], keep=2)

        assert (report.threads, report.checkpoints, report.kept) == (1, len(history) - 2, 2)
        assert report.writes > 0 and (report.blobs > 0) == is_postgres_url(database)
        after = agent.get_state(thread)
        assert (after.values, after.next, after.config) == (before.values, before.next, before.config)
        snapshots = list(agent.get_state_history(thread))
        assert [s.config["configurable"]["checkpoint_id"] for s in snapshots] == history[:2]
        assert snapshots[0].parent_config == snapshots[1].config  # the kept ones form one chain
        assert snapshots[1].parent_config is None  # the oldest kept one is now the root
        assert agent.get_state(at(thread, history[2])).values == {}  # a deleted checkpoint is gone

        finished = resume(agent, thread, extra_iterations=2)
    assert (finished["finish_reason"], finished["final_answer"], finished["iteration"]) == (
        "answered",
        "done",
        ROUNDS + 1,
    )


def test_the_rows_of_deleted_checkpoints_are_gone(database):
    with open_checkpointer(database) as saver:
        thread = broken_run(saver)
        name = thread["configurable"]["thread_id"]
        agent = agent_on(saver, [])
        latest, *older = ids(agent, thread)
        prune(saver, name)
    assert [row[2] for row in rows(database, "checkpoints", name)] == [latest]
    written_for = {row[2] for row in rows(database, writes_table(database), name)}
    assert written_for <= {latest} and not written_for & set(older)
    if is_postgres_url(database):
        import psycopg

        # Every stored value left is one the kept checkpoint names, and it names no missing one.
        with psycopg.connect(database) as conn:
            (versions,) = conn.execute(
                "SELECT checkpoint -> 'channel_versions' FROM checkpoints WHERE thread_id = %s", (name,)
            ).fetchone()
            blobs = conn.execute("SELECT channel, version FROM checkpoint_blobs WHERE thread_id = %s", (name,))
            assert set(blobs.fetchall()) <= set(versions.items())


def test_a_thread_stopped_mid_step_keeps_its_pending_writes_and_continues(database):
    """An approval stops a round between its calls: the answers given so far are pending writes of the latest
    checkpoint, which a prune keeps, so the run goes on from there and asks nothing twice."""
    sent = []

    @tool
    def send(text: str) -> str:
        """Send a message."""
        sent.append(text)
        return f"sent {text!r}"

    calls = parallel_calls([("send", {"text": "first"}), ("send", {"text": "second"})], ids=["c1", "c2"])
    with open_checkpointer(database) as saver:
        agent = build_agent(
            ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 1}), calls, "done"]),
            [add, send],
            checkpointer=saver,
            approve=["send"],
        )
        thread = new_thread()
        agent.invoke({"task": "send two"}, thread)
        (second,) = agent.invoke(Command(resume={"action": "reject", "reason": "not this"}), thread)["__interrupt__"]
        assert second.value["tool_call_id"] == "c2"
        pending = saver.get_tuple(thread).pending_writes
        assert pending

        assert prune(saver, thread["configurable"]["thread_id"]).checkpoints > 0

        assert saver.get_tuple(thread).pending_writes == pending
        done = agent.invoke(Command(resume={"action": "approve"}), thread)
    assert done["finish_reason"] == "answered" and sent == ["second"]


def test_a_paused_thread_continues_with_invoke_none_after_a_prune(database):
    with open_checkpointer(database) as saver:
        agent = agent_on(saver, [tool_call("add", {"a": 1, "b": 1}), tool_call("add", {"a": 2, "b": 1}), "3"])
        thread = new_thread()
        agent.invoke({"task": "add"}, thread, interrupt_before=["execute_tool"])
        agent.invoke(None, thread, interrupt_before=["execute_tool"])
        assert agent.get_state(thread).next == ("execute_tool",)
        prune(saver, thread["configurable"]["thread_id"])
        assert len(ids(agent, thread)) == 1
        done = agent.invoke(None, thread)
    assert (done["finish_reason"], done["final_answer"]) == ("answered", "3")


def test_marked_and_kept_ids_survive_and_other_threads_are_untouched(database):
    with open_checkpointer(database) as saver:
        thread, other = broken_run(saver), broken_run(saver)
        agent = agent_on(saver, [])
        history, other_history = ids(agent, thread), ids(agent, other)
        marked = mark(saver, at(thread, history[5]), "before round 3")
        assert marked == history[5]
        assert mark(saver, thread) == history[0]  # without an id: the latest

        prune(saver, thread["configurable"]["thread_id"], keep_ids=history[9])  # one id, or several

        assert ids(agent, thread) == [history[0], history[5], history[9]]
        assert ids(agent, other) == other_history
        labels = {m.checkpoint_id: m.label for m in marks(saver, thread["configurable"]["thread_id"])}
        assert labels == {history[0]: "", history[5]: "before round 3"}
        snapshots = list(agent.get_state_history(thread))
        assert [s.parent_config["configurable"]["checkpoint_id"] for s in snapshots[:2]] == history[5:10:4]

        assert unmark(saver, at(thread, history[5])) and not unmark(saver, at(thread, history[5]))
        prune(saver, thread["configurable"]["thread_id"])
        assert ids(agent, thread) == [history[0]]  # still marked, and the latest anyway


def test_pruning_every_thread_and_a_dry_run(database):
    with open_checkpointer(database) as saver:
        threads = [broken_run(saver, rounds=2) for _ in range(2)]
        agent = agent_on(saver, [])
        counts = [len(ids(agent, thread)) for thread in threads]

        dry = prune(saver, [t["configurable"]["thread_id"] for t in threads], dry_run=True)
        assert dry.dry_run and (dry.threads, dry.checkpoints) == (2, sum(counts) - 2)
        assert [len(ids(agent, thread)) for thread in threads] == counts  # nothing deleted

        report = prune(saver, vacuum=True)  # every thread in the database
        assert report.threads >= 2 and report.checkpoints >= sum(counts) - 2
        assert report.bytes_before > 0 and report.bytes_after > 0
        assert [len(ids(agent, thread)) for thread in threads] == [1, 1]


def test_vacuum_shrinks_a_sqlite_file(tmp_path):
    path = tmp_path / "runs.sqlite"
    saver = sqlite_checkpointer(path)
    broken_run(saver, rounds=20)
    kept = prune(saver)
    assert kept.bytes_after >= kept.bytes_before  # freed pages stay in the file
    shrunk = prune(saver, vacuum=True)
    assert shrunk.checkpoints == 0 and shrunk.bytes_after < kept.bytes_before / 4
    saver.conn.close()
    assert path.stat().st_size == shrunk.bytes_after


def test_a_run_saving_while_its_thread_is_pruned_keeps_every_new_checkpoint(database):
    """A prune from another connection in the middle of a run deletes only what was saved before it."""
    pruned = []

    @tool
    def prune_now(n: int) -> str:
        """Prune this thread from another connection."""
        with open_checkpointer(database) as elsewhere:
            pruned.append(prune(elsewhere, thread["configurable"]["thread_id"]))
        return "pruned"

    thread = new_thread()
    script = [tool_call("add", {"a": 1, "b": 1}), tool_call("prune_now", {"n": 1}), tool_call("add", {"a": 2, "b": 1})]
    with open_checkpointer(database) as saver:
        agent = agent_on(saver, [*script, "done"], tools=(add, prune_now))
        done = agent.invoke({"task": "go"}, thread)
        assert done["finish_reason"] == "answered" and pruned[0].checkpoints > 0
        history = list(agent.get_state_history(thread))
    assert history[0].values["iteration"] == 4
    # Everything saved from the prune on is still there, one chain down to the checkpoint it kept.
    chain = [s.parent_config["configurable"]["checkpoint_id"] for s in history if s.parent_config]
    assert chain == [s.config["configurable"]["checkpoint_id"] for s in history[1:]]
    assert history[-1].parent_config is None


def saved(saver, thread_id, ns, count, **metadata):
    """`count` empty checkpoints saved one after another in namespace `ns` of the thread."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    for step in range(count):
        config = saver.put(config, empty_checkpoint(), {"source": "loop", "step": step, **metadata}, {})


def test_each_namespace_keeps_its_latest_checkpoints(database):
    thread = new_thread()["configurable"]["thread_id"]
    with open_checkpointer(database) as saver:
        saved(saver, thread, "", 3)
        saved(saver, thread, "tool:1", 4)
        report = prune(saver, thread, keep=2)
        left = {ns: len(list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})))
                for ns in ("", "tool:1")}  # fmt: skip
    assert (report.checkpoints, report.kept, left) == (3, 4, {"": 2, "tool:1": 2})


def appended(items, writes):
    return [*items, *(item for write in writes for item in write)]


class Counting(TypedDict):
    items: Annotated[list[int], DeltaChannel(appended, snapshot_frequency=4)]
    n: int


def counting(saver):
    """A graph of one node that appends 0, 1, ... 9 to `items`, a channel saved as deltas, a snapshot every 4."""
    graph = StateGraph(Counting)
    graph.add_node("count", lambda state: {"items": [state["n"]], "n": state["n"] + 1})
    graph.add_edge(START, "count")
    graph.add_conditional_edges("count", lambda state: END if state["n"] >= 10 else "count")
    return graph.compile(checkpointer=saver)


def test_a_reinloop_thread_keeps_its_messages_and_resumes_after_a_prune(database):
    """reinloop saves its messages as deltas: the one checkpoint left stores them in full."""
    with open_checkpointer(database) as saver:
        thread = broken_run(saver)
        agent = agent_on(saver, ["done"], max_iterations=ROUNDS)
        window = agent.get_state(thread).values["messages"]
        assert len(window) >= 4
        assert "messages" not in saver.get_tuple(thread).checkpoint["channel_values"]  # a delta: no copy
        prune(saver, thread["configurable"]["thread_id"])
        assert len(ids(agent, thread)) == 1
        assert agent.get_state(thread).values["messages"] == window
        assert resume(agent, thread, extra_iterations=1)["final_answer"] == "done"


def test_langgraphs_own_saver_apis_read_every_kept_checkpoint_of_a_reinloop_thread_after_a_prune(database):
    """get_tuple, list, get_state_history and a resumed run, on the checkpoints prune kept and rewrote (the
    window is a delta channel: a kept checkpoint whose ancestors went now stores a snapshot of it)."""
    with open_checkpointer(database) as saver:
        thread = broken_run(saver, rounds=6)
        agent = agent_on(saver, ["done"], max_iterations=6)
        history = ids(agent, thread)
        middle = history[len(history) // 2]
        mark(saver, at(thread, middle))
        before = {cid: agent.get_state(at(thread, cid)).values for cid in history}

        prune(saver, thread["configurable"]["thread_id"], keep=3)

        kept = ids(agent, thread)
        assert set(history[:3]) | {middle} <= set(kept) and len(kept) < len(history)
        assert [item.config["configurable"]["checkpoint_id"] for item in saver.list(thread)] == kept
        for cid in kept:
            assert saver.get_tuple(at(thread, cid)).config["configurable"]["checkpoint_id"] == cid
            assert agent.get_state(at(thread, cid)).values == before[cid]
        assert [snapshot.values for snapshot in agent.get_state_history(thread)] == [before[cid] for cid in kept]
        assert resume(agent, thread, extra_iterations=2)["final_answer"] == "done"


@pytest.mark.parametrize("read", ["through the graph", "from the rows kept"])
def test_a_channel_saved_as_deltas_keeps_its_value_at_every_kept_checkpoint(database, read):
    """Through the graph passed, the kept checkpoints store the channel's value; for a graph that has no such
    channel (reinloop's), they keep the checkpoints the value is rebuilt from, back to the nearest snapshot."""
    thread = new_thread()
    with open_checkpointer(database) as saver:
        graph = counting(saver)
        assert graph.invoke({"items": [], "n": 0}, thread)["items"] == list(range(10))
        history = ids(graph, thread)
        middle = at(thread, history[len(history) // 2])
        before = graph.get_state(middle).values["items"]
        mark(saver, middle)

        report = prune(saver, thread["configurable"]["thread_id"], graph=graph if read == "through the graph" else None)

        left = ids(graph, thread)
        assert graph.get_state(thread).values["items"] == list(range(10))
        assert graph.get_state(middle).values["items"] == before
        if read == "through the graph":
            assert (report.kept, len(left)) == (2, 2)
        else:  # the latest, the marked one, and the ancestors back to each one's snapshot (one every 4 changes)
            assert 2 < report.kept == len(left) < len(history) - 2
        assert graph.invoke({"items": [10], "n": 5}, thread)["items"] == [*range(10), 10, 5, 6, 7, 8, 9]


def test_a_saver_whose_tables_changed_is_not_pruned(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    with open_checkpointer(db) as saver:
        thread = broken_run(saver)
        name = thread["configurable"]["thread_id"]
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE writes RENAME COLUMN idx TO position")
    counts = (len(rows(db, "checkpoints", name)), len(rows(db, "writes", name)))
    with pytest.raises(ConfigurationError, match="table 'writes' lacks the columns idx"):
        prune(db, name)
    assert (len(rows(db, "checkpoints", name)), len(rows(db, "writes", name))) == counts


def test_what_cannot_be_pruned_or_marked_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="keep must be at least 1"):
        prune(str(tmp_path / "runs.sqlite"), keep=0)
    with pytest.raises(ConfigurationError, match="not a InMemorySaver"):
        prune(InMemorySaver())
    with pytest.raises(PruneError, match="no checkpoint to mark at thread 'nope'"):
        mark(str(tmp_path / "runs.sqlite"), {"configurable": {"thread_id": "nope"}})
    with pytest.raises(PruneError, match="names none"):
        unmark(str(tmp_path / "runs.sqlite"), {"configurable": {"thread_id": "nope"}})
    assert marks(str(tmp_path / "runs.sqlite")) == []  # no marks table yet: none, and nothing created


def test_the_prune_and_mark_commands(home):  # noqa: F811 - the CLI tests' fixture
    db = home / "runs.sqlite"
    saver = sqlite_checkpointer(db)
    thread = broken_run(saver)
    name = thread["configurable"]["thread_id"]
    history = ids(agent_on(saver, []), thread)
    saver.conn.close()

    dry = cli("prune", "--dry-run", home=home)
    assert dry.returncode == 0, dry.stderr
    assert f"would delete {len(history) - 1} checkpoints" in dry.stdout and "dry run" in dry.stdout
    assert len(rows(str(db), "checkpoints", name)) == len(history)  # nothing deleted

    marked = cli("mark", name, "--checkpoint", history[3][-8:], "--label", "look here", home=home)
    assert marked.returncode == 0, marked.stderr
    assert history[3] in marked.stdout
    assert cli("mark", name, "--checkpoint", "no-such-id", home=home).returncode == 2

    done = cli("prune", "--thread", name, "--keep-id", history[6][-8:], "--vacuum", home=home)
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(history) - 3} checkpoints" in done.stdout
    assert sorted(row[2] for row in rows(str(db), "checkpoints", name)) == sorted(history[i] for i in (0, 3, 6))
    shown = cli("history", name, home=home)
    assert "look here" in shown.stdout and "3 checkpoints" in shown.stdout

    unknown = cli("prune", "--thread", "nope", "--keep-id", "abc", home=home)
    assert unknown.returncode == 2 and "unknown thread 'nope'" in unknown.stderr
    assert cli("prune", "--keep-id", "abc", home=home).returncode == 2  # --keep-id needs --thread
