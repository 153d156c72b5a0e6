"""The seeds' tools: behaviour, security, and a whole agent run with `default_toolset`."""

import json
import os
import sqlite3
from datetime import datetime

import pytest
from langchain_core.tools import ToolException
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, default_toolset
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from reinloop.tools import (
    CalculatorTool,
    CurrentTimeTool,
    Database,
    DbInsertTool,
    DbQueryTool,
    FileReadTool,
    FileWriteTool,
    FinancialDataTool,
    LocalCorpusSearch,
    TimerTool,
    ToolRegistry,
    TranslateTool,
    WeatherTool,
    WebSearchTool,
    Workspace,
)
from reinloop.tools.search import BUNDLED_CORPUS
from tests.conftest import THREAD

# calculator -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(2 + 3) * 4", "20"),
        ("10 / 4", "2.5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -2", "0.25"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(pi, 3)", "3.142"),
        ("max(1, 5, 3)", "5"),
        ("1.1 + 2.2", "3.3"),
        ("10 ** 30", "1" + "0" * 30),
    ],
    ids=["mul", "div", "floordiv", "mod", "pow", "negative-pow", "functions", "constant", "max", "float", "big"],
)
def test_calculator_arithmetic(expression, value):
    assert CalculatorTool().invoke({"expression": expression}) == value


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("__import__('os').system('echo pwned')", "only these functions can be called"),
        ("().__class__.__bases__[0].__subclasses__()", "only these functions can be called"),
        ("(1).__class__", "Attribute is not allowed"),
        ("__builtins__", "unknown name '__builtins__'"),
        ("open('/etc/passwd')", "only these functions can be called"),
        ("eval('1+1')", "only these functions can be called"),
        ("sqrt.__call__(4)", "only these functions can be called"),
        ("[x for x in range(10**9)]", "ListComp is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("'a' * 10", "only numbers are allowed"),
        ("9 ** 9 ** 9", "too large"),
        ("(10 ** 1000) * (10 ** 1000)", "too large"),
        ("2 ** 100000", "too large"),
        ("1e308 * 10", "not a finite number"),
        ("exp(1000)", "too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "math error"),
        ("(-8) ** 0.5", "not a real number"),
        ("2 +", "invalid syntax"),
        ("1" + "+1" * 99, "too complex"),
    ],
    ids=["import", "subclasses", "attribute", "dunder-name", "open", "eval", "method-call", "comprehension",
         "lambda", "string", "pow-bomb", "mul-bomb", "big-pow", "float-overflow", "exp-overflow", "div-zero",
         "mod-zero", "domain", "complex", "syntax", "too-complex"],
)  # fmt: skip
def test_calculator_refuses_code_and_resource_abuse(expression, error):
    with pytest.raises(ToolException, match=error):
        CalculatorTool().invoke({"expression": expression})


def test_calculator_input_length_is_limited_by_its_schema():
    with pytest.raises(Exception, match="at most 200 characters"):
        CalculatorTool().invoke({"expression": "1+" * 150 + "1"})


# files ----------------------------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path):
    return Workspace(tmp_path / "ws")


def test_file_write_then_read_and_append(workspace):
    write, read = FileWriteTool(workspace=workspace), FileReadTool(workspace=workspace)
    assert write.invoke({"path": "notes/today.md", "content": "# Today\n"}) == "wrote 8 characters to notes/today.md"
    write.invoke({"path": "notes/today.md", "content": "- buy milk\n", "mode": "append"})
    assert read.invoke({"path": "notes/today.md"}) == "# Today\n- buy milk\n"
    assert read.invoke({"path": "notes/../notes/today.md"}).startswith("# Today")  # `..` that stays inside is fine


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/etc/passwd", "is absolute"),
        ("../outside.txt", "leads outside the workspace"),
        ("notes/../../outside.txt", "leads outside the workspace"),
        ("escape/passwd", "leads outside the workspace"),  # a symlink to a folder outside
        ("link_to_secret", "leads outside the workspace"),  # a symlink to a file outside
        ("", "at least 1 character"),
    ],
    ids=["absolute", "dotdot", "nested-dotdot", "symlinked-folder", "symlinked-file", "empty"],
)
def test_file_tools_refuse_to_leave_the_workspace(workspace, tmp_path, path, error):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(tmp_path, workspace.root / "escape")
    os.symlink(secret, workspace.root / "link_to_secret")
    for tool, args in (
        (FileReadTool(workspace=workspace), {"path": path}),
        (FileWriteTool(workspace=workspace), {"path": path, "content": "overwritten"}),
    ):
        with pytest.raises(Exception, match=error):
            tool.invoke(args)
    assert secret.read_text() == "top secret"
    assert not (tmp_path / "outside.txt").exists()


def test_file_sizes_are_limited(workspace):
    (workspace.root / "big.txt").write_bytes(b"x" * 300_000)
    with pytest.raises(ToolException, match="files over 256000 bytes cannot be read"):
        FileReadTool(workspace=workspace).invoke({"path": "big.txt"})
    with pytest.raises(Exception, match="at most 100000 characters"):
        FileWriteTool(workspace=workspace).invoke({"path": "a.txt", "content": "x" * 100_001})
    (workspace.root / "binary.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ToolException, match="not a UTF-8 text file"):
        FileReadTool(workspace=workspace).invoke({"path": "binary.bin"})


def test_file_write_is_atomic(workspace, monkeypatch):
    write = FileWriteTool(workspace=workspace)
    write.invoke({"path": "data.txt", "content": "old"})

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write.invoke({"path": "data.txt", "content": "new"})
    assert (workspace.root / "data.txt").read_text() == "old"
    assert sorted(p.name for p in workspace.root.iterdir()) == ["data.txt"]  # no temporary left behind


# database -------------------------------------------------------------------------------------------------


@pytest.fixture
def database(tmp_path):
    return Database(tmp_path / "agent.sqlite")


def test_db_insert_then_query(database):
    insert, query = DbInsertTool(database), DbQueryTool(database)
    assert (
        insert.invoke({"table": "expenses", "values": {"item": "coffee", "amount": 3.5}})
        == "inserted row 1 into expenses"
    )
    result = query.invoke({"sql": "SELECT item, amount, currency FROM expenses"})
    assert result == {"rows": [{"item": "coffee", "amount": 3.5, "currency": None}]}


@pytest.mark.parametrize(
    "value",
    ["x'); DROP TABLE notes; --", "1 OR 1=1", "'; DELETE FROM notes WHERE '1'='1", 'Robert"); DROP TABLE notes;--'],
    ids=["drop", "tautology", "delete", "double-quote"],
)
def test_sql_injection_through_insert_values_is_stored_as_text(database, value):
    DbInsertTool(database).invoke({"table": "notes", "values": {"title": "keep", "body": "me"}})
    DbInsertTool(database).invoke({"table": "notes", "values": {"title": value, "body": value}})
    rows = DbQueryTool(database).invoke({"sql": "SELECT title, body FROM notes ORDER BY id"})["rows"]
    assert rows == [{"title": "keep", "body": "me"}, {"title": value, "body": value}]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"table": "notes; DROP TABLE notes", "values": {"title": "x"}}, "Input should be 'notes'"),
        ({"table": "notes", "values": {"title) VALUES (1); DROP TABLE notes; --": "x"}}, "has the columns"),
        ({"table": "notes", "values": {"id": 1}}, "has the columns"),
        ({"table": "notes", "values": {}}, "at least 1 item"),
    ],
    ids=["table-name", "column-name", "id-column", "no-values"],
)
def test_db_insert_accepts_only_declared_tables_and_columns(database, args, error):
    with pytest.raises(Exception, match=error):
        DbInsertTool(database).invoke(args)
    assert sqlite3.connect(database.path).execute("SELECT count(*) FROM notes").fetchone() == (0,)


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("DELETE FROM notes", "only SELECT queries are allowed"),
        ("DROP TABLE notes", "only SELECT queries are allowed"),
        ("INSERT INTO notes (title) VALUES ('x')", "only SELECT queries are allowed"),
        ("UPDATE notes SET title = 'x'", "only SELECT queries are allowed"),
        ("SELECT 1; DROP TABLE notes", "one statement at a time"),
        ("PRAGMA writable_schema = 1", "only SELECT queries are allowed"),
        ("ATTACH DATABASE 'other.sqlite' AS other", "only SELECT queries are allowed"),
        ("CREATE TABLE evil (x)", "only SELECT queries are allowed"),
        ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "took too long"),
        ("SELECT * FROM users", r"no such table: users\. The tables are: notes\(id, title, body, created_at\)"),
    ],
    ids=["delete", "drop", "insert", "update", "two-statements", "pragma", "attach", "create", "runaway", "unknown"],
)
def test_db_query_is_read_only_and_bounded(database, sql, error):
    DbInsertTool(database).invoke({"table": "notes", "values": {"title": "keep"}})
    with pytest.raises(ToolException, match=error):
        DbQueryTool(database).invoke({"sql": sql})
    conn = sqlite3.connect(database.path)
    assert conn.execute("SELECT title FROM notes").fetchall() == [("keep",)]
    assert [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == [
        "_reinloop_effects",  # the ledger of idempotency keys
        "notes",
        "contacts",
        "expenses",
    ]


def test_db_query_row_limit(database):
    for n in range(30):
        DbInsertTool(database).invoke({"table": "notes", "values": {"title": f"n{n}"}})
    result = DbQueryTool(database).invoke({"sql": "SELECT title FROM notes", "max_rows": 5})
    assert len(result["rows"]) == 5 and "only the first 5" in result["note"]


def test_database_declarations_are_checked():
    with pytest.raises(ValueError, match="identifiers"):
        Database("x.sqlite", {"bad name": ("a",)})


# search ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "source", "fact"),
    [
        ("speed of light", "speed_of_light.md", "299,792,458"),
        ("boiling point of water", "water.md", "100 degrees Celsius"),
        ("first ascent of Everest", "mount_everest.md", "29 May 1953"),
        ("Python 3 release date", "python_language.md", "3 December 2008"),
    ],
    ids=["light", "water-stemmed", "everest", "python"],
)
def test_local_search_ranks_the_relevant_passage_first(query, source, fact):
    best = WebSearchTool(backend=LocalCorpusSearch(BUNDLED_CORPUS)).invoke({"query": query, "max_results": 3})[0]
    assert best["source"] == source and fact in best["snippet"]


def test_local_search_reads_a_users_folder_and_reindexes_on_change(tmp_path):
    (tmp_path / "a.md").write_text("# Alpha\n\nThe launch code word is pineapple.\n")
    search = LocalCorpusSearch(tmp_path)
    assert search.search("launch code word", 5)[0].snippet == "The launch code word is pineapple."
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("Zebras sleep standing up.")
    assert search.search("zebras", 5)[0].source == "sub/b.txt"


@pytest.mark.parametrize("query", ['"unbalanced light', "light AND (b OR", "NEAR(light water)", "title:light"], ids=str)
def test_search_treats_fts_syntax_as_words(query):
    hits = LocalCorpusSearch(BUNDLED_CORPUS).search(query, 3)
    assert hits and all(isinstance(hit.snippet, str) for hit in hits)


def test_search_without_words_is_a_clear_error():
    with pytest.raises(ToolException, match="has no words to search for"):
        LocalCorpusSearch(BUNDLED_CORPUS).search("* ( ) :", 3)


def test_search_arguments_are_bounded():
    tool = WebSearchTool(backend=LocalCorpusSearch(BUNDLED_CORPUS))
    with pytest.raises(Exception, match="at most 50 characters"):
        tool.invoke({"query": "x" * 51})
    with pytest.raises(Exception, match="less than or equal to 10"):
        tool.invoke({"query": "light", "max_results": 11})
    assert tool.invoke({"query": "qwertyuiop"}) == []


# translate, clock, financial data ------------------------------------------------------------------------


def test_translate_asks_the_chat_model():
    model = ScriptedChatModel(replies=["Bonjour le monde"])
    assert TranslateTool(model=model).invoke({"text": "Hello world", "target_language": "French"}) == "Bonjour le monde"
    system, user = model.calls[0].messages
    assert "into French" in system.content and user.content == "Hello world"


def test_current_time_and_timer():
    fixed = CurrentTimeTool(now=lambda zone: datetime(2026, 1, 2, 3, 4, 5, tzinfo=zone))
    assert fixed.invoke({"timezone": "Asia/Shanghai"}) == "2026-01-02T03:04:05+08:00 (Friday, Asia/Shanghai)"
    with pytest.raises(ToolException, match="unknown time zone 'Mars/Olympus'"):
        fixed.invoke({"timezone": "Mars/Olympus"})
    waits = []
    timer = TimerTool(sleep=waits.append)
    assert timer.invoke({"seconds": 2.5}) == "waited 2.5 s" and waits == [2.5]
    with pytest.raises(Exception, match="less than or equal to 60"):
        timer.invoke({"seconds": 3600})


def test_financial_data():
    tool = FinancialDataTool()
    assert tool.invoke({"company": "woodgrove bank", "metric": "net_income", "year": 2023})["value"] == 921.7
    assert tool.invoke({"company": "TSPN", "metric": "employees"}) == {
        "company": "Tailspin Toys", "year": 2024, "metric": "employees", "value": 845, "unit": "people",
    }  # fmt: skip
    with pytest.raises(ToolException, match=r"unknown company 'Acme'; known companies: Contoso Ltd \(CNTS\)"):
        tool.invoke({"company": "Acme", "metric": "revenue"})
    with pytest.raises(ToolException, match="years available: 2022, 2023, 2024"):
        tool.invoke({"company": "Contoso Ltd", "metric": "revenue", "year": 2019})


# weather against a real HTTP server ---------------------------------------------------------------------


def test_weather_success(weather_server):
    result = WeatherTool(base_url=weather_server).invoke({"city": "Paris"})
    assert result == {"city": "Paris", "temperature_c": 18.5, "condition": "cloudy"}


@pytest.mark.parametrize(
    ("city", "error"),
    [
        ("Slowtown", "did not answer within 0.3 s"),
        ("Crashville", "failed \\(HTTP 500\\)"),
        ("Atlantis", "no weather data for 'Atlantis'"),
    ],
    ids=["slow", "server-error", "unknown-city"],
)
def test_weather_failures_are_tool_errors(weather_server, city, error):
    with pytest.raises(ToolException, match=error):
        WeatherTool(base_url=weather_server, timeout_s=0.3).invoke({"city": city})


def test_weather_unreachable_service():
    with pytest.raises(ToolException, match="cannot reach the weather service"):
        WeatherTool(base_url="http://127.0.0.1:9", timeout_s=1).invoke({"city": "Paris"})


def test_weather_errors_reach_the_model_as_observations(weather_server, tmp_path):
    tools = default_toolset(tmp_path, weather_base_url=weather_server)
    model = ScriptedChatModel(replies=[tool_call("weather", {"city": "Crashville"}), "no weather today"])
    agent = build_agent(model, tools, config=AgentConfig(tool_timeout_s=5), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "weather in Crashville?"}, THREAD)
    assert result["finish_reason"] == "answered"
    assert "failed (HTTP 500)" in model.calls[1].messages[-1].content


# the toolset in an agent ----------------------------------------------------------------------------------


def test_default_toolset_contents(tmp_path):
    names = [tool.name for tool in default_toolset(tmp_path)]
    assert names == ["web_search", "calculator", "file_read", "file_write", "current_time", "timer", "db_insert",
                     "db_query", "financial_data"]  # fmt: skip
    full = default_toolset(tmp_path, model=ScriptedChatModel(), weather_base_url="http://127.0.0.1:1")
    assert {"translate", "weather"} <= {tool.name for tool in full}


def test_only_the_tools_without_effects_are_retried_in_place(tmp_path):
    tools = default_toolset(tmp_path, model=ScriptedChatModel(), weather_base_url="http://127.0.0.1:1")
    registry = ToolRegistry(tools)
    assert {entry.name for entry in registry if not entry.retryable} == {"file_write", "db_insert"}
    assert all(entry.idempotent for entry in registry)  # a call in flight at a crash runs again, with its key


def test_the_model_sees_the_schema_constraints(tmp_path):
    model = ScriptedChatModel(replies=["ok"])
    build_agent(model, default_toolset(tmp_path)).invoke({"task": "t"})
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in model.calls[0].tools}
    search = schemas["web_search"]["properties"]
    assert search["query"]["maxLength"] == 50 and "keywords" in search["query"]["description"]
    assert (search["max_results"]["minimum"], search["max_results"]["maximum"]) == (1, 10)
    assert schemas["db_insert"]["properties"]["table"]["enum"] == ["notes", "contacts", "expenses"]
    assert "revenue" in schemas["financial_data"]["properties"]["metric"]["enum"]
    assert schemas["file_write"]["properties"]["mode"]["enum"] == ["overwrite", "append"]


def test_an_agent_searches_calculates_writes_a_file_and_inserts_a_row(tmp_path):
    script = [
        tool_call("web_search", {"query": "Eiffel Tower tall", "max_results": 2}),
        tool_call("calculator", {"expression": "330 * 3.28084"}),
        parallel_calls(
            [
                ("file_write", {"path": "reports/eiffel.md", "content": "The Eiffel Tower is 330 m (1082.68 ft)."}),
                ("db_insert", {"table": "notes", "values": {"title": "Eiffel Tower", "body": "330 m"}}),
            ]
        ),
        tool_call("db_query", {"sql": "SELECT title, body FROM notes"}),
        "The Eiffel Tower is 330 m, about 1082.68 ft, tall. Saved to reports/eiffel.md and the notes table.",
    ]
    model = ScriptedChatModel(replies=script)
    agent = build_agent(model, default_toolset(tmp_path), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "How tall is the Eiffel Tower in feet? Save it."}, THREAD)

    assert result["finish_reason"] == "answered" and result["consecutive_errors"] == 0
    observations = [m for m in result["messages"] if m.type == "tool"]
    assert all(m.status == "success" for m in observations)
    assert "330 metres tall" in observations[0].content  # cut to observation_max_chars, so no longer JSON
    assert observations[1].content == "1082.6772"
    assert (tmp_path / "reports" / "eiffel.md").read_text() == "The Eiffel Tower is 330 m (1082.68 ft)."
    rows = sqlite3.connect(tmp_path / "agent.sqlite").execute("SELECT title, body FROM notes").fetchall()
    assert rows == [("Eiffel Tower", "330 m")]
    assert json.loads(observations[-1].content) == {"rows": [{"title": "Eiffel Tower", "body": "330 m"}]}


def test_an_empty_search_is_a_pseudo_success_for_the_agent(tmp_path):
    model = ScriptedChatModel(replies=[tool_call("web_search", {"query": "qwertyuiop"}), "nothing found"])
    agent = build_agent(model, default_toolset(tmp_path))
    result = agent.invoke({"task": "search"})
    assert result["consecutive_errors"] == 1
    assert "returned no usable result" in model.calls[1].messages[-1].content
