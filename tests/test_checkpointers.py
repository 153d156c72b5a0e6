"""The same run, break and resume on every kind of checkpointer users deploy: memory, SQLite, PostgreSQL; and
one clear error that changes nothing for a file that is not a checkpoint database or a damaged checkpoint."""

import asyncio
import contextlib
import logging

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, resume
from reinloop.checkpoint import aopen_checkpointer, open_checkpointer
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import add, lookup, new_thread

# Three sums, a lookup that fails (the tool raises: an error the streak counts), then the answer.
SCRIPT = [tool_call("add", {"a": n, "b": 1}) for n in range(3)] + [
    tool_call("lookup", {"key": "last_sum"}),
    "3 is the last sum",
]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def database(request, tmp_path):
    if request.param == "memory":
        return InMemorySaver()
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite")
    return request.getfixturevalue("postgres_url")


def test_break_then_resume_in_a_new_agent_on_the_same_database(database, caplog):
    caplog.set_level(logging.WARNING)
    thread = new_thread()

    def agent_on(saver):
        model = ScriptedChatModel(
            respond=lambda messages: SCRIPT[sum(m.type == "ai" and m.name != "circuit_break" for m in messages)]
        )
        return build_agent(model, [add, lookup], config=AgentConfig(max_iterations=2), checkpointer=saver)

    def session(fn):
        if isinstance(database, InMemorySaver):
            return fn(agent_on(database))
        with open_checkpointer(database) as saver:  # a fresh connection, as another process would open
            return fn(agent_on(saver))

    stopped = session(lambda agent: agent.invoke({"task": "add 1 to 0, 1, 2"}, thread))
    assert (stopped["finish_reason"], stopped["iteration"]) == ("max_iterations", 2)

    def check_saved(agent):
        state = agent.get_state(thread)
        assert state.next == ()
        assert state.values["finish_reason"] == "max_iterations"
        assert state.values["decision"]["kind"] == "act"  # records come back as plain data
        return len(list(agent.get_state_history(thread)))

    assert session(check_saved) > 2 * 6

    finished = session(lambda agent: resume(agent, thread, extra_iterations=3))
    assert (finished["finish_reason"], finished["final_answer"], finished["iteration"]) == (
        "answered",
        "3 is the last sum",
        5,
    )
    assert finished["consecutive_errors"] == 1  # the failed lookup in between, carried in saved state
    [line] = finished["streak_errors"]  # and the call that failed, with its error
    assert line.startswith('lookup({"key": "last_sum"}): ') and "unknown key 'last_sum'" in line
    assert "unregistered" not in caplog.text  # state holds no custom types a strict serializer would refuse


@pytest.mark.parametrize("first", ["reinloop's saver", "LangGraph's SqliteSaver"])
def test_either_sqlite_saver_continues_a_thread_the_other_saved(tmp_path, first):
    """reinloop's SQLite saver writes shorter channel versions than LangGraph's `SqliteSaver`; each still
    continues a thread the other saved: a run broken under one is resumed to its answer under the other."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from reinloop import sqlite_checkpointer

    path, thread = tmp_path / "runs.sqlite", new_thread()
    savers = [lambda: sqlite_checkpointer(path), lambda: SqliteSaver(sqlite3.connect(path, check_same_thread=False))]
    if first != "reinloop's saver":
        savers.reverse()
    model = ScriptedChatModel(
        respond=lambda messages: SCRIPT[sum(m.type == "ai" and m.name != "circuit_break" for m in messages)]
    )
    before = savers[0]()
    stopped = build_agent(model, [add, lookup], config=AgentConfig(max_iterations=2), checkpointer=before).invoke(
        {"task": "add 1 to 0, 1, 2"}, thread
    )
    versions = before.get_tuple(thread).checkpoint["channel_versions"]
    assert stopped["iteration"] == 2
    assert all(len(str(version)) == 32 for version in versions.values()) == (first == "reinloop's saver")
    after = savers[1]()
    finished = resume(build_agent(model, [add, lookup], checkpointer=after), thread, extra_iterations=3)
    assert (finished["finish_reason"], finished["final_answer"], finished["iteration"]) == (
        "answered",
        "3 is the last sum",
        5,
    )
    assert len(finished["messages"]) > len(stopped["messages"]) - 2  # the window carried over and grew


def test_a_long_thread_reads_back_across_full_copies_of_its_window(tmp_path):
    """The window is saved as deltas with a full copy every MESSAGES_SNAPSHOT_EVERY changes: every saved step of
    a thread past several copies reads back the window the run had there, from a new connection too."""
    from reinloop import sqlite_checkpointer
    from reinloop.state import MESSAGES_SNAPSHOT_EVERY

    # One or two changes a round (its messages; a compaction's removals once in ten): two full copies or more.
    rounds = 2 * MESSAGES_SNAPSHOT_EVERY
    script = [tool_call("add", {"a": n, "b": 1}) for n in range(rounds)] + ["counted"]
    path, thread = tmp_path / "runs.sqlite", new_thread()
    saver = sqlite_checkpointer(path)
    agent = build_agent(ScriptedChatModel(replies=script), [add], config=AgentConfig(max_iterations=2 * rounds),
                        checkpointer=saver)  # fmt: skip
    seen = {}  # the window at each checkpoint, as the run had it when it saved the checkpoint
    for saved in agent.stream({"task": "count"}, thread, stream_mode="checkpoints"):
        seen[saved["config"]["configurable"]["checkpoint_id"]] = [m.id for m in saved["values"].get("messages", [])]
    copies = [t for t in saver.list(thread) if "messages" in t.checkpoint["channel_values"]]
    assert len(copies) >= 2
    saver.conn.close()

    reopened = sqlite_checkpointer(path)
    again = build_agent(ScriptedChatModel(replies=["done"]), [add], checkpointer=reopened)
    history = {s.config["configurable"]["checkpoint_id"]: [m.id for m in s.values.get("messages", [])]
               for s in again.get_state_history(thread)}  # fmt: skip
    assert history == seen and len(seen) > 4 * rounds
    assert again.invoke({"task": "and now?"}, thread)["final_answer"] == "done"  # a new task on the thread
    reopened.conn.close()


def _changed_keys_run(chunks):
    """The values of consecutive_errors the nodes wrote in `chunks` (the run's ("updates" | "values", chunk)
    pairs), once every plain key a node wrote is checked to differ from the state before the node ran."""
    from reinloop.graph import _PLAIN_KEYS

    before: dict = {}
    written = []
    for mode, chunk in chunks:
        if mode == "values":
            before = chunk
            continue
        for node, update in chunk.items():
            for key in (update or {}).keys() & _PLAIN_KEYS:
                assert key not in before or update[key] != before[key], (node, key, update[key])
                written.append((node, key, update[key]))
    return [value for node, key, value in written if key == "consecutive_errors"]


# A tool error (a lookup that raises), then successes: consecutive_errors goes 0 -> 1 -> 0 and then stays 0.
CHANGING_SCRIPT = [tool_call("lookup", {"key": "nope"}), *(tool_call("add", {"a": n, "b": 1}) for n in range(3)), "3"]


# The thread's saved writes of consecutive_errors, in LangGraph's SQLite schema (sync and async savers alike).
ERROR_ROWS = "SELECT count(*) FROM writes WHERE thread_id = ? AND channel = 'consecutive_errors'"


def test_a_node_saves_only_the_keys_it_changes(tmp_path):
    """A key without a reducer that a node sets to the value it holds is not written: no write row, no new
    channel version, no key in the streamed update. Keys that change are written, reset counters included."""
    from reinloop import sqlite_checkpointer

    saver = sqlite_checkpointer(tmp_path / "runs.sqlite")
    agent = build_agent(ScriptedChatModel(replies=CHANGING_SCRIPT), [add, lookup], checkpointer=saver)
    thread = new_thread()
    chunks = agent.stream({"task": "count"}, thread, stream_mode=["updates", "values"])
    assert _changed_keys_run(chunks) == [1, 0]
    assert saver.conn.execute(ERROR_ROWS, (thread["configurable"]["thread_id"],)).fetchone() == (2,)
    saver.conn.close()


async def test_an_async_node_saves_only_the_keys_it_changes(tmp_path):
    """The same under astream, where decide, compress_memory and execute_tool run their async forms."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "runs.sqlite")) as saver:
        agent = build_agent(ScriptedChatModel(replies=CHANGING_SCRIPT), [add, lookup], checkpointer=saver)
        thread = new_thread()
        chunks = [chunk async for chunk in agent.astream({"task": "count"}, thread, stream_mode=["updates", "values"])]
        assert _changed_keys_run(chunks) == [1, 0]
        async with saver.conn.execute(ERROR_ROWS, (thread["configurable"]["thread_id"],)) as cursor:
            assert await cursor.fetchone() == (2,)


# A bad database file --------------------------------------------------------------------------------------


def _foreign_database(path):
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()


def _half_a_langgraph_database(path):
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE checkpoints (thread_id TEXT, checkpoint_id TEXT, checkpoint BLOB)")
    conn.commit()
    conn.close()


# Files no checkpointer may open, written by `make(path)`, and what the error says about each.
BAD_FILES = {
    "random-bytes": (lambda path: path.write_bytes(bytes(range(256)) * 16), "not a SQLite database"),
    "text": (lambda path: path.write_text("name,age\nada,36\n"), "not a SQLite database"),
    "foreign-app": (
        _foreign_database,
        "another application's database (tables 'users'), without LangGraph's 'checkpoints' and 'writes'",
    ),
    "half-langgraph": (_half_a_langgraph_database, "it has no 'writes' table"),
}


def unchanged(path):
    """What must stay the same in a file nothing may change: its bytes and its modification time."""
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("kind", list(BAD_FILES))
@pytest.mark.parametrize("opener", ["sqlite_checkpointer", "open_checkpointer"])
def test_a_file_that_is_not_a_checkpoint_database_is_refused_and_left_unchanged(tmp_path, kind, opener):
    from reinloop import sqlite_checkpointer
    from reinloop.errors import CheckpointError

    make, message = BAD_FILES[kind]
    path = tmp_path / "runs.sqlite"
    make(path)
    before = unchanged(path)
    with pytest.raises(CheckpointError) as raised:
        if opener == "sqlite_checkpointer":
            sqlite_checkpointer(path)
        else:
            with open_checkpointer(path):
                pass
    assert str(path) in str(raised.value) and message in str(raised.value)
    assert unchanged(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.sqlite"]  # no -wal or -shm left beside it


def test_a_folder_is_refused_as_a_checkpoint_database(tmp_path):
    from reinloop import sqlite_checkpointer
    from reinloop.errors import CheckpointError

    with pytest.raises(CheckpointError, match="is a folder, not a SQLite database file"):
        sqlite_checkpointer(tmp_path)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(CheckpointError, match="cannot create or open the SQLite database"):
        sqlite_checkpointer(tmp_path / "a-file" / "runs.sqlite")  # its folder is a file


@pytest.mark.parametrize("kind", ["missing", "empty", "lease-only"])
def test_a_missing_or_empty_file_becomes_a_new_checkpoint_database(tmp_path, kind):
    """A lease-only file is left by a run on a saver that makes its tables lazily, stopped before its first step."""
    import sqlite3

    from reinloop import sqlite_checkpointer
    from reinloop.lease import LEASES_TABLE

    path = tmp_path / "new" / "runs.sqlite"
    if kind != "missing":
        path.parent.mkdir()
        path.touch()
    if kind == "lease-only":
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute(f"CREATE TABLE {LEASES_TABLE} (thread_id TEXT PRIMARY KEY)")
    saver = sqlite_checkpointer(path)
    tables = {row[0] for row in saver.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    saver.conn.close()
    assert {"checkpoints", "writes"} <= tables


async def _open_async(url):
    async with aopen_checkpointer(url):
        pass


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unreachable_postgres_database_is_a_checkpoint_error_that_hides_the_password(mode):
    pytest.importorskip("langgraph.checkpoint.postgres")
    from reinloop.errors import CheckpointError

    url = "postgresql://ada:s3cret@127.0.0.1:9/runs"
    with pytest.raises(CheckpointError) as raised:
        if mode == "async":
            asyncio.run(_open_async(url))
        else:
            with open_checkpointer(url):
                pass
    message = str(raised.value)
    assert message.startswith("cannot use the PostgreSQL database at postgresql://ada:***@127.0.0.1:9/runs: ")
    assert "s3cret" not in message and "\n" not in message


# A damaged checkpoint -------------------------------------------------------------------------------------

LATEST = "(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = :thread)"
OLDEST = "(SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = :thread)"
LAST_MESSAGE = "(SELECT max(rowid) FROM writes WHERE thread_id = :thread AND channel = 'messages')"
# One damaged row each, as SQL run on a saved thread (`:thread`), and what reading it failed with before.
DAMAGES = {
    "truncated": f"UPDATE checkpoints SET checkpoint = substr(checkpoint, 1, length(checkpoint) / 2) "
    f"WHERE thread_id = :thread AND checkpoint_id = {LATEST}",  # ValueError: unexpected end of file
    "garbage": f"UPDATE checkpoints SET checkpoint = x'9367617262616765ff00' "
    f"WHERE thread_id = :thread AND checkpoint_id = {LATEST}",  # TypeError in LangGraph: a list, not a record
    "not-a-record": f"UPDATE checkpoints SET checkpoint = x'05' WHERE thread_id = :thread AND checkpoint_id = {LATEST}",
    "metadata": f"UPDATE checkpoints SET metadata = '{{not json' "
    f"WHERE thread_id = :thread AND checkpoint_id = {LATEST}",  # JSONDecodeError
    "type-tag": f"UPDATE checkpoints SET type = 'weird' WHERE thread_id = :thread AND checkpoint_id = {LATEST}",
    "ancestor": f"UPDATE checkpoints SET checkpoint = x'9367617262616765ff00' "
    f"WHERE thread_id = :thread AND checkpoint_id = {OLDEST}",  # read rebuilding the delta-saved messages
    "write": f"UPDATE writes SET value = x'c1c1' WHERE rowid = {LAST_MESSAGE}",  # ValueError: invalid type
}


def damage(path, thread_id, kind):
    """Damage one row of the thread saved in the SQLite file at `path`, as `DAMAGES[kind]` says."""
    import sqlite3

    conn = sqlite3.connect(path)
    assert conn.execute(DAMAGES[kind], {"thread": thread_id}).rowcount == 1
    conn.commit()
    conn.close()


def saved_thread(path, thread_id):
    """A short answered run on `thread_id`, saved in the SQLite file at `path` and closed."""
    from reinloop import sqlite_checkpointer

    saver = sqlite_checkpointer(path)
    model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2}), "3"])
    build_agent(model, [add], checkpointer=saver).invoke({"task": "add"}, {"configurable": {"thread_id": thread_id}})
    saver.conn.close()


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_checkpoint_is_a_checkpoint_error_naming_the_thread(tmp_path, kind):
    from reinloop import sqlite_checkpointer
    from reinloop.errors import CheckpointError
    from reinloop.graph import agent_topology

    path = tmp_path / "runs.sqlite"
    saved_thread(path, "t-damaged")
    saved_thread(path, "t-fine")
    damage(path, "t-damaged", kind)
    before = unchanged(path)
    saver = sqlite_checkpointer(path)
    agent, config = agent_topology(saver), {"configurable": {"thread_id": "t-damaged"}}
    for read in (lambda: agent.get_state(config), lambda: list(agent.get_state_history(config))):
        with pytest.raises(CheckpointError) as raised:
            read()
        assert "thread 't-damaged'" in str(raised.value) and str(path) in str(raised.value)
        assert "damaged" in str(raised.value)
    assert agent.get_state({"configurable": {"thread_id": "t-fine"}}).values["final_answer"] == "3"
    saver.conn.close()
    assert unchanged(path) == before
