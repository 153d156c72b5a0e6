"""Crash safety and exactly-once effects: idempotency keys, the write ledgers, fail-closed tools, durability."""

from __future__ import annotations

import sqlite3
import time

import pytest
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from reinloop import AgentConfig, ConfigurationError, build_agent, idempotency_key, sqlite_checkpointer
from reinloop._langgraph import CONFIG_KEY_DURABILITY, CONFIG_KEY_RESUMING
from reinloop.nodes.execute_tool import execute_tool
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from reinloop.tools import Database, DbInsertTool, DbQueryTool, FileWriteTool, Workspace
from reinloop.tools.effects import IDEMPOTENCY_KEY, call_key
from tests.conftest import add, make_context, new_thread

KEY = {"configurable": {IDEMPOTENCY_KEY: "thread-1/1/call_a"}}


def test_db_insert_with_the_same_key_inserts_once_and_answers_the_same(tmp_path):
    database = Database(tmp_path / "agent.sqlite")
    insert = DbInsertTool(database)
    args = {"table": "notes", "values": {"title": "a", "body": "b"}}
    first = insert.invoke(args, KEY)
    again = insert.invoke(args, KEY)
    other = insert.invoke(args, {"configurable": {IDEMPOTENCY_KEY: "thread-1/2/call_b"}})
    assert first == again == "inserted row 1 into notes"
    assert other == "inserted row 2 into notes"
    with sqlite3.connect(database.path) as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (2,)
    # Without a key (outside an agent), every call inserts.
    insert.invoke(args)
    insert.invoke(args)
    with sqlite3.connect(database.path) as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (4,)


def test_the_ledger_is_not_the_agents_data(tmp_path):
    database = Database(tmp_path / "agent.sqlite")
    DbInsertTool(database).invoke({"table": "notes", "values": {"title": "a"}}, KEY)
    with pytest.raises(ToolException, match="prohibited"):
        DbQueryTool(database).invoke({"sql": "SELECT * FROM _reinloop_effects"})
    with pytest.raises(ValueError, match="reserved"):
        Database(tmp_path / "other.sqlite", {"_reinloop_effects": ("key",)})


def test_file_append_with_the_same_key_appends_once(tmp_path):
    write = FileWriteTool(workspace=Workspace(tmp_path))
    args = {"path": "log.txt", "content": "line\n", "mode": "append"}
    assert write.invoke(args, KEY) == write.invoke(args, KEY) == "wrote 5 characters to log.txt"
    write.invoke(args, {"configurable": {IDEMPOTENCY_KEY: "thread-1/2/call_b"}})
    assert (tmp_path / "log.txt").read_text() == "line\nline\n"


def test_a_write_recorded_but_not_made_is_made_by_the_rerun(tmp_path, monkeypatch):
    workspace = Workspace(tmp_path)
    write = FileWriteTool(workspace=workspace)
    (tmp_path / "log.txt").write_text("old\n")
    args = {"path": "log.txt", "content": "new\n", "mode": "append"}

    def die(target, content):  # the process dies after the ledger commit, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr("reinloop.tools.files._atomic_write", die)
    with pytest.raises(KeyboardInterrupt):
        write.invoke(args, KEY)
    assert (tmp_path / "log.txt").read_text() == "old\n"
    monkeypatch.undo()
    write.invoke(args, KEY)
    write.invoke(args, KEY)
    assert (tmp_path / "log.txt").read_text() == "old\nnew\n"


def test_the_agent_cannot_touch_the_ledger_folder(tmp_path):
    write = FileWriteTool(workspace=Workspace(tmp_path))
    with pytest.raises(ToolException, match="private folder"):
        write.invoke({"path": ".reinloop/effects.sqlite", "content": "x"})


def test_every_call_gets_a_distinct_key_even_when_the_provider_repeats_ids():
    seen = []

    @tool
    def remember(text: str) -> str:
        """Remember a text."""
        seen.append(idempotency_key())
        return "ok"

    # The same call id in two replies (some servers number calls per reply): still two keys.
    replies = [tool_call("remember", {"text": "a"}, id="call_0"), tool_call("remember", {"text": "b"}, id="call_0")]
    agent = build_agent(ScriptedChatModel(replies=[*replies, "done"]), [remember], checkpointer=InMemorySaver())
    thread = new_thread()
    agent.invoke({"task": "remember"}, thread)
    thread_id = thread["configurable"]["thread_id"]
    assert seen == [call_key(thread_id, 1, "call_0"), call_key(thread_id, 2, "call_0")]


def test_a_non_idempotent_call_in_flight_at_a_crash_is_not_run_again():
    runs = []

    @tool
    def send(text: str) -> str:
        """Send a message."""
        runs.append(text)
        return "sent"

    send.metadata = {"reinloop": {"idempotent": False}}
    ctx = make_context([send, add])
    check = {"call_id": "c1", "name": "send", "args": {"text": "hi"}, "signature": "s", "key": "t/1/c1"}
    check |= {"error_kind": None, "error": None}
    resumed = {"configurable": {CONFIG_KEY_RESUMING: True}}
    update = execute_tool(check, ctx, resumed)
    assert runs == []
    (outcome,) = update["tool_results"]
    assert outcome["error_kind"] == "unknown_outcome" and "not run again" in outcome["content"]
    assert update["in_doubt"] == [{"call_id": "c1", "name": "send", "args": {"text": "hi"}, "key": "t/1/c1"}]
    # The first run of a call, and an idempotent tool on resume, run as usual.
    assert execute_tool(check, ctx, {"configurable": {}})["tool_results"][0]["content"] == "sent"
    add_check = {**check, "name": "add", "args": {"a": 1, "b": 2}}
    assert execute_tool(add_check, ctx, resumed)["tool_results"][0]["content"] == "3"
    assert runs == ["hi"]


def test_durability_is_sync_by_default_and_configurable(tmp_path):
    saver = sqlite_checkpointer(tmp_path / "db.sqlite")
    agent = build_agent(ScriptedChatModel(), [add], checkpointer=saver)
    assert agent.config["configurable"][CONFIG_KEY_DURABILITY] == "sync"
    fast = build_agent(ScriptedChatModel(), [add], checkpointer=saver, config=AgentConfig(durability="async"))
    assert fast.config["configurable"][CONFIG_KEY_DURABILITY] == "async"
    # Without a checkpointer there is nothing to make durable (and LangGraph fails on a durability then).
    plain = build_agent(ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2}), "3"]), [add])
    assert CONFIG_KEY_DURABILITY not in plain.config.get("configurable", {})
    assert plain.invoke({"task": "add"})["final_answer"] == "3"


class SlowSaver(SqliteSaver):
    """A SqliteSaver whose checkpoint writes take a while, as on a busy database server."""

    def put(self, *args, **kwargs):
        time.sleep(0.05)
        return super().put(*args, **kwargs)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_sync_durability_saves_each_step_before_the_next_starts(tmp_path, durability):
    saver = SlowSaver(sqlite3.connect(tmp_path / "db.sqlite", check_same_thread=False))
    observed = []

    @tool
    def probe(n: int) -> str:
        """Look at what is saved."""
        saved = saver.get_tuple(thread).checkpoint["channel_values"]
        observed.append([check["args"]["n"] for check in saved.get("checks", [])])
        return f"saw {n}"

    replies = [tool_call("probe", {"n": n}) for n in range(3)] + ["done"]
    config = AgentConfig(durability=durability)
    agent = build_agent(ScriptedChatModel(replies=replies), [probe], checkpointer=saver, config=config)
    thread = new_thread()
    agent.invoke({"task": "probe"}, thread)
    # When a call runs, the step that validated it is saved: a crash now cannot lose the decision.
    if durability == "sync":
        assert observed == [[0], [1], [2]]
    else:  # LangGraph's default lets the loop run ahead of what is saved
        assert observed != [[0], [1], [2]]


def test_a_sqlite_saver_that_would_lose_every_step_is_refused(tmp_path):
    plain = SqliteSaver(sqlite3.connect(tmp_path / "db.sqlite"))
    with pytest.raises(ConfigurationError, match="check_same_thread=False"):
        build_agent(ScriptedChatModel(), [add], checkpointer=plain)
    shared = SqliteSaver(sqlite3.connect(tmp_path / "db.sqlite", check_same_thread=False))
    agent = build_agent(ScriptedChatModel(replies=[parallel_calls([("add", {"a": 1, "b": 2})]), "3"]), [add],
                        checkpointer=shared)  # fmt: skip
    assert agent.invoke({"task": "add"}, new_thread())["final_answer"] == "3"
