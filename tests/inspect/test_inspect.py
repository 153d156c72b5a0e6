"""`reinloop inspect`: the web app's routes (Starlette's test client) over runs made by the real command
against a scripted OpenAI-compatible server, the page's actions, and the command itself
(tests/inspect/test_inspect_timeline.py: the timeline; tests/inspect/test_inspect_browser.py: the page in Chromium)."""

import io
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from starlette.testclient import TestClient

from reinloop.cli import main
from reinloop.config import MAX_ITERATIONS
from reinloop.inspect import inspect_app
from reinloop.inspect.actions import ActionError, answer_from_form
from tests.openai_server import ScriptedOpenAIServer
from tests.test_checkpointers import BAD_FILES, damage, saved_thread

SCRIPT = '<script>alert("owned")</script>'


@pytest.mark.parametrize(
    ("form", "answer"),
    [
        ({"action": "approve"}, {"action": "approve"}),
        ({"action": "reject", "reason": "no"}, {"action": "reject", "reason": "no"}),
        ({"action": "edit", "args": '{"text": "bye"}'}, {"action": "edit", "args": {"text": "bye"}}),
    ],
    ids=["approve", "reject", "edit"],
)
def test_the_approval_form_reads_as_the_answer_the_terminal_gives(form, answer):
    assert answer_from_form(form) == answer


@pytest.mark.parametrize("form", [{"action": "edit", "args": "{nope"}, {"action": "edit", "args": "[1]"}, {}])
def test_a_bad_approval_form_is_an_action_error(form):
    with pytest.raises(ActionError):
        answer_from_form(form)


# the app over runs made by the command ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with ScriptedOpenAIServer() as running:
        yield running


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def command(*args: str) -> int:
    """`reinloop ARGS` in this process, with a closed terminal input (an approval is left waiting)."""
    with mock.patch("sys.stdin", io.StringIO("")):
        return main(list(args))


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory) -> Path:
    """A runs database with three threads: "broken" (max_iterations, after reading a file holding a script
    tag), "waiting" (at an approval of file_write) and "answered"."""
    folder = tmp_path_factory.mktemp("runs")
    (folder / "ws").mkdir()
    (folder / "ws" / "page.html").write_text(SCRIPT)
    db, base = str(folder / "runs.sqlite"), ["--base-url", server.base_url, "--no-memory", "--quiet"]
    common = [*base, "--workspace", str(folder / "ws"), "--db", db]
    server.replies = ["It is 5."]
    assert command("run", "What is 2 + 3?", "--thread", "answered", *common) == 0
    server.replies = [{"tool": "file_read", "args": {"path": "page.html"}},
                      {"tool": "calculator", "args": {"expression": "1 + 1"}}]  # fmt: skip
    assert command("run", "Read the page.", "--thread", "broken", "--max-iterations", "2", *common) == 3
    server.replies = [{"tool": "file_write", "args": {"path": "note.txt", "content": "hi"}}]
    assert command("run", "Write a note.", "--thread", "waiting", *common) == 2  # no answer on the terminal
    return folder / "runs.sqlite"


@pytest.fixture
def own_runs(runs, tmp_path) -> Path:
    """A copy of the runs database, for a test that changes it."""
    copy = tmp_path / "runs.sqlite"
    shutil.copy(runs, copy)
    return copy


def client(db, **options) -> TestClient:
    return TestClient(inspect_app(str(db), **options), base_url="http://127.0.0.1")


def test_the_list_shows_each_thread_newest_first(runs):
    page = client(runs).get("/")
    assert page.status_code == 200
    text = page.text
    assert text.index("/thread/waiting") < text.index("/thread/broken") < text.index("/thread/answered")
    assert "What is 2 + 3?" in text and "max_iterations" in text and "answered" in text
    assert "waiting for approval" in text
    assert "3 in all" in text and "page 1 of 1" in text


def test_the_list_pages(runs):
    app = client(runs, page_size=2)
    first, second = app.get("/").text, app.get("/?page=2").text
    assert "page 1 of 2" in first and "/thread/waiting" in first and "/thread/broken" in first
    assert 'rel="next" href="/?page=2"' in first and 'rel="prev"' not in first
    assert "page 2 of 2" in second and "/thread/answered" in second and "/thread/broken" not in second
    assert 'rel="prev" href="/?page=1"' in second and 'rel="next"' not in second
    assert "page 2 of 2" in app.get("/?page=99").text  # past the end: the last page
    assert "page 1 of 2" in app.get("/?page=nope").text


def test_a_broken_thread_shows_its_timeline_and_the_stopping_node(runs):
    page = client(runs).get("/thread/broken")
    assert page.status_code == 200
    text = page.text
    assert "file_read" in text and "calculator" in text and "round 2" in text
    assert 'id="finish-reason" class="reason reason-max_iterations">max_iterations' in text
    assert 'id="node_circuit_break" class="node stopped"' in text
    assert 'id="node_decide" class="node visited"' in text
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text  # the graph is inline
    assert "reinloop resume broken --extra-iterations 10" in text  # read-only: how to continue, no form
    assert 'id="resume-form"' not in text


def test_without_graphviz_the_page_says_so_in_the_graph_s_place(runs, monkeypatch):
    import graphviz

    def missing(*args, **kwargs):
        raise graphviz.ExecutableNotFound(["dot"])

    monkeypatch.setattr(graphviz.Digraph, "pipe", missing)
    page = client(runs).get("/thread/broken")
    assert page.status_code == 200 and "needs Graphviz" in page.text and "round 2" in page.text


def test_model_and_tool_text_is_escaped(runs):
    text = client(runs).get("/thread/broken").text
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in text


def test_a_thread_waiting_for_approval_shows_the_call(runs):
    text = client(runs).get("/thread/waiting").text
    assert (
        "waiting for approval" in text
        and "file_write" in text
        and 'id="node_validate_args" class="node stopped"' in text
    )
    assert 'name="interrupt_id"' not in text  # read-only


def test_the_status_names_the_latest_checkpoint(runs):
    status = client(runs).get("/status/broken").json()
    assert status["finish_reason"] == "max_iterations" and status["next"] == [] and status["job"] is None
    assert client(runs).get("/status/waiting").json()["next"] == ["validate_args"]
    fragment = client(runs).get("/fragment/broken").text
    assert status["checkpoint"] in fragment and "<html" not in fragment


@pytest.mark.parametrize("path", ["/thread/nope", "/status/nope", "/fragment/nope"])
def test_an_unknown_thread_is_a_404_page(runs, path):
    page = client(runs).get(path)
    assert page.status_code == 404 and "There is no thread &#39;nope&#39;" in page.text


def test_a_missing_database_is_a_clear_page(tmp_path):
    page = client(tmp_path / "none.sqlite").get("/")
    assert page.status_code == 404
    assert f"There is no runs database at {tmp_path / 'none.sqlite'}" in page.text and "reinloop run" in page.text
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_file_that_is_not_a_runs_database_is_a_clear_page(tmp_path, kind):
    make, message = BAD_FILES[kind]
    make(tmp_path / "data.sqlite")
    page = client(tmp_path / "data.sqlite").get("/")
    assert page.status_code == 500 and "The runs database cannot be read" in page.text
    assert message.replace("'", "&#39;") in page.text and "Traceback" not in page.text


def test_a_damaged_checkpoint_is_a_clear_page(tmp_path):
    path = tmp_path / "runs.sqlite"
    saved_thread(path, "t-damaged")
    damage(path, "t-damaged", "truncated")
    page = client(path).get("/thread/t-damaged")
    assert page.status_code == 500 and "t-damaged" in page.text and "unexpected end of file" in page.text
    assert "Traceback" not in page.text


@pytest.mark.parametrize("path", ["/resume/broken", "/approve/waiting"])
def test_actions_are_refused_without_allow_actions(own_runs, path):
    before = client(own_runs).get("/status/broken").json()
    refused = client(own_runs).post(path, data={"extra_iterations": "3", "action": "approve"})
    assert refused.status_code == 403 and "--allow-actions" in refused.text
    assert client(own_runs).get("/status/broken").json() == before


def test_an_action_needs_the_page_token_and_origin(own_runs):
    app = client(own_runs, allow_actions=True)
    assert app.post("/resume/broken", data={"token": "guess"}).status_code == 403
    token = token_of(app.get("/thread/broken").text)
    foreign = app.post("/resume/broken", data={"token": token}, headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403 and "another site" in foreign.text


def test_a_request_for_another_host_name_is_refused(runs):
    """A site whose name is made to point at 127.0.0.1 (DNS rebinding) cannot read the pages or their token."""
    app = TestClient(inspect_app(str(runs), allow_actions=True), base_url="http://evil.example")
    refused = app.get("/thread/broken")
    assert refused.status_code == 400 and "token" not in refused.text
    assert client(runs).get("/", headers={"host": "localhost:8765"}).status_code == 200


@pytest.mark.parametrize(
    "given",
    ["lots", "0", "-3", str(MAX_ITERATIONS + 1), "99999999999999999999999999", "9" * 5000],
    ids=["not-a-number", "zero", "negative", "one-past-the-limit", "past-64-bits", "past-python-s-digits"],
)
def test_extra_iterations_outside_the_library_s_limit_are_a_400_naming_it(own_runs, given):
    app = client(own_runs, allow_actions=True)
    token = token_of(app.get("/thread/broken").text)
    refused = app.post("/resume/broken", data={"token": token, "extra_iterations": given})
    assert refused.status_code == 400
    assert "whole number of at least 1 and at most 1,000,000 (reinloop.config.MAX_ITERATIONS)" in refused.text
    assert app.get("/status/broken").json()["job"] is None


def test_the_resume_command_refuses_extra_iterations_past_the_same_limit(runs, capsys):
    with pytest.raises(SystemExit) as exited:
        command("resume", "broken", "--db", str(runs), "--extra-iterations", "99999999999999999999999999")
    assert exited.value.code == 2 and "at most 1,000,000 (reinloop.config.MAX_ITERATIONS)" in capsys.readouterr().err


@pytest.mark.parametrize("page", ["99999999999999999999999999", "9" * 5000, "-1", "0"])
def test_any_page_number_shows_a_page_of_the_list(runs, page):
    listed = client(runs, page_size=2).get(f"/?page={page}")
    assert listed.status_code == 200 and "of 2" in listed.text


def test_threads_saved_in_postgres_are_listed_and_shown(server, postgres_url, tmp_path):
    import uuid

    thread = f"inspect-{uuid.uuid4().hex[:8]}"
    server.replies = ["It is 5."]
    options = ["--base-url", server.base_url, "--no-memory", "--quiet", "--workspace", str(tmp_path)]
    assert command("run", "What is 2 + 3?", "--thread", thread, "--db", postgres_url, *options) == 0
    app = client(postgres_url)
    listed = app.get("/")
    assert listed.status_code == 200 and f"/thread/{thread}" in listed.text
    shown = app.get(f"/thread/{thread}")
    assert shown.status_code == 200 and "It is 5." in shown.text
    password = postgres_url.split("@")[0].rsplit(":", 1)[-1]
    assert f":{password}@" not in listed.text  # the URL is shown with its password hidden


def token_of(page: str) -> str:
    return page.split('name="token" value="', 1)[1].split('"', 1)[0]


def wait_for_job(app: TestClient, thread: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = app.get(f"/status/{thread}").json()
        if status["job"] and not status["job"].startswith("running"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"the job on {thread!r} did not end: {status}")


def test_resume_from_the_page_runs_resume_with_extra_iterations_and_the_hint(server, own_runs):
    app = client(own_runs, allow_actions=True, no_memory=True)
    page = app.get("/thread/broken").text
    assert 'id="resume-form"' in page
    server.replies = ["Read it: it is a script."]
    done = app.post("/resume/broken", data={"token": token_of(page), "extra_iterations": "3", "hint": "Answer now."},
                    follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"] == "/thread/broken"
    status = wait_for_job(app, "broken")
    assert status["job"] == "done answered" and status["finish_reason"] == "answered"
    assert "Answer now." in str(server.requests[-1]["messages"])  # the hint reached the model
    text = app.get("/thread/broken").text
    assert "Read it: it is a script." in text and 'id="node___end__" class="node stopped"' in text
    assert "a fresh budget of 3 rounds" in text


@pytest.mark.parametrize(
    ("form", "review", "written"),
    [
        ({"action": "approve"}, "approved", "hi"),
        ({"action": "edit", "args": '{"path": "note.txt", "content": "edited"}'}, "edited", "edited"),
        ({"action": "reject", "reason": "Not today."}, "rejected", None),
    ],
    ids=["approve", "edit", "reject"],
)
def test_an_approval_answered_from_the_page_continues_the_run(server, runs, own_runs, form, review, written):
    app = client(own_runs, allow_actions=True, no_memory=True)
    page = app.get("/thread/waiting").text
    interrupt = page.split('name="interrupt_id" value="', 1)[1].split('"', 1)[0]
    server.replies = ["Done."]
    app.post("/approve/waiting", data={"token": token_of(page), "interrupt_id": interrupt, **form})
    status = wait_for_job(app, "waiting")
    assert status["job"] == "done answered", status
    note = runs.parent / "ws" / "note.txt"  # the workspace saved with the run
    if written is not None:
        assert note.read_text() == written
        note.unlink()
    else:
        assert "Not today." in str(server.requests[-1]["messages"]) and not note.exists()
    assert f"{review} by a person" in app.get("/thread/waiting").text


def test_a_decision_s_calls_run_once_each_has_its_answer(monkeypatch):
    from reinloop.inspect.actions import Jobs

    started = []
    monkeypatch.setattr(Jobs, "_start", lambda self, thread, what, words, answers: started.append(answers) or "job")
    jobs = Jobs(None)
    assert jobs.answer("t", "first", {"action": "approve"}, ["first", "second"]) is None
    assert jobs.answered("t") == {"first": {"action": "approve"}} and not started
    assert jobs.answer("t", "second", {"action": "reject", "reason": "no"}, ["first", "second"]) == "job"
    assert started == [{"first": {"action": "approve"}, "second": {"action": "reject", "reason": "no"}}]
    assert jobs.answered("t") == {}
    with pytest.raises(ActionError, match="no longer waiting"):
        jobs.answer("t", "gone", {"action": "approve"}, ["first"])


def test_an_edit_failing_the_schema_leaves_the_call_waiting(server, own_runs):
    app = client(own_runs, allow_actions=True, no_memory=True)
    page = app.get("/thread/waiting").text
    interrupt = page.split('name="interrupt_id" value="', 1)[1].split('"', 1)[0]
    app.post("/approve/waiting", data={"token": token_of(page), "interrupt_id": interrupt, "action": "edit",
                                       "args": '{"path": 3}'})  # fmt: skip
    status = wait_for_job(app, "waiting")
    assert status["job"] == "done waiting for approval" and status["next"] == ["validate_args"]
    assert "not accepted" in app.get("/thread/waiting").text


def test_the_command_serves_the_app(monkeypatch, runs, capsys):
    served = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **options: served.update(options, app=app))
    assert main(["inspect", "--db", str(runs), "--port", "8123"]) == 0
    assert served["host"] == "127.0.0.1" and served["port"] == 8123
    said = capsys.readouterr().out
    assert "http://127.0.0.1:8123/" in said and "read-only" in said


def test_without_the_extra_the_command_names_it(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "uvicorn", None)
    assert main(["inspect"]) == 2
    assert "pip install 'reinloop[inspect]'" in capsys.readouterr().err


def test_the_static_files_ship_with_the_package(runs):
    app = client(runs)
    assert "fetch(" in app.get("/static/inspect.js").text and "http" not in app.get("/static/inspect.js").text
    assert app.get("/static/inspect.css").status_code == 200
    page = app.get("/thread/broken").text
    assert "https://" not in page and "http://" not in page.replace("http://www.w3.org", "")


def test_reading_the_pages_saves_nothing(runs):
    before = sqlite3.connect(runs).execute("SELECT COUNT(*) FROM checkpoints").fetchone()
    client(runs).get("/thread/broken")
    assert sqlite3.connect(runs).execute("SELECT COUNT(*) FROM checkpoints").fetchone() == before


def test_the_command_serves_until_ctrl_c_and_then_exits_cleanly(runs):
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    served = subprocess.Popen([sys.executable, "-m", "reinloop", "inspect", "--db", str(runs), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert f"http://127.0.0.1:{port}/" in served.stdout.readline()
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert "/thread/broken" in page.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.1)
        served.send_signal(signal.SIGINT)
        assert served.wait(10) == 0
        assert "Traceback" not in served.stderr.read()
    finally:
        if served.poll() is None:
            served.kill()


# rows that cannot be read ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stored", ["CAST(? AS TEXT)", "?"], ids=["text-that-is-not-utf8", "a-blob"])
def test_a_thread_id_that_is_not_utf8_is_listed_as_unreadable_and_its_page_is_a_404(own_runs, stored):
    with sqlite3.connect(own_runs) as conn:
        conn.execute(
            "INSERT INTO checkpoints SELECT " + stored + ", checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
            "type, checkpoint, metadata FROM checkpoints WHERE thread_id = 'answered'",
            (b"bad-\xff\xfe",),
        )
    app = client(own_runs)
    listed = app.get("/")
    assert listed.status_code == 200 and "/thread/waiting" in listed.text and "4 in all" in listed.text
    assert "unreadable: this thread&#39;s id is not UTF-8 text (b&#39;bad-\\xff\\xfe&#39;)" in listed.text
    for path in ["/thread/bad-%FF%FE", "/status/bad-%FF%FE", "/fragment/bad-%FF%FE"]:
        page = app.get(path)
        assert page.status_code == 404 and "not UTF-8 text is listed as unreadable" in page.text, path


def test_a_damaged_checkpoint_is_a_row_saying_so_in_the_list(tmp_path):
    path = tmp_path / "runs.sqlite"
    saved_thread(path, "t-damaged")
    saved_thread(path, "t-fine")
    damage(path, "t-damaged", "truncated")
    listed = client(path).get("/")
    assert listed.status_code == 200 and "/thread/t-fine" in listed.text
    assert "unreadable: t-damaged" in listed.text.replace("thread &#39;t-damaged&#39;", "t-damaged")


def test_a_page_over_an_empty_database_file_lists_nothing_and_leaves_the_file_as_it_was(tmp_path):
    empty = tmp_path / "runs.sqlite"
    empty.touch()
    assert "No threads yet" in client(empty).get("/").text
    assert client(empty).get("/thread/t").status_code == 404
    assert empty.stat().st_size == 0 and sorted(tmp_path.iterdir()) == [empty]


# a running writer, another process's lease, a thread started from Python -----------------------------------


def library_process(*args: str) -> subprocess.Popen[str]:
    """`python -m tests.inspect_writer ARGS`, once it has said it started (run) or holds the lease (hold)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen([sys.executable, "-m", "tests.inspect_writer", *args], stdout=subprocess.PIPE,
                               text=True, env=env)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() in ("started", "held")
    return process


@pytest.fixture
def writer(own_runs):
    """A library process running thread "busy" in `own_runs` for minutes, a checkpoint every few milliseconds."""
    process = library_process("run", str(own_runs), "busy", "100000", "0.005")
    yield process
    process.kill()
    process.wait()


def timed(app: TestClient, path: str) -> tuple[int, float, str]:
    began = time.perf_counter()
    page = app.get(path)
    return page.status_code, time.perf_counter() - began, page.text


def test_pages_answer_in_bounded_time_while_a_writer_runs_on_the_thread(own_runs, writer):
    app = client(own_runs, history_window=200)
    time.sleep(2)  # hundreds of checkpoints: more than the page reads
    for _ in range(4):
        for path in ["/thread/busy", "/fragment/busy", "/status/busy", "/"]:
            status, seconds, text = timed(app, path)
            assert status == 200 and seconds < 15, (path, seconds)
        time.sleep(0.5)  # the writer adds hundreds more meanwhile
    assert "Its latest 200 checkpoints" in text or "Its latest 200 checkpoints" in app.get("/thread/busy").text
    assert writer.poll() is None  # it was writing all along


def test_a_resume_or_approval_for_a_thread_another_process_holds_is_busy(server, own_runs):
    app = client(own_runs, allow_actions=True, no_memory=True)
    page = app.get("/thread/waiting").text
    interrupt = page.split('name="interrupt_id" value="', 1)[1].split('"', 1)[0]
    holders = [library_process("hold", str(own_runs), thread, "60") for thread in ("broken", "waiting")]
    try:
        resumed = app.post("/resume/broken", data={"token": token_of(page), "extra_iterations": "3"})
        approved = app.post("/approve/waiting", data={"token": token_of(page), "interrupt_id": interrupt,
                                                      "action": "approve"})  # fmt: skip
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    for refused, holder in zip([resumed, approved], holders, strict=True):
        assert refused.status_code == 409 and "busy, nothing was run" in refused.text
        assert f"pid {holder.pid}" in refused.text and "Try again once that run has ended" in refused.text
    assert app.get("/status/broken").json()["job"] is None and app.get("/status/waiting").json()["job"] is None


def test_a_job_that_finds_its_thread_taken_meanwhile_says_busy(own_runs, monkeypatch):
    from reinloop.inspect.actions import Jobs

    monkeypatch.setattr(Jobs, "_ready", lambda self, thread: {})  # the page looked before the holder took it
    app = client(own_runs, allow_actions=True, no_memory=True)
    token = token_of(app.get("/thread/broken").text)
    holder = library_process("hold", str(own_runs), "broken", "60")
    try:
        app.post("/resume/broken", data={"token": token, "extra_iterations": "3"})
        status = wait_for_job(app, "broken")
    finally:
        holder.kill()
        holder.wait()
    assert status["job"].startswith("busy busy, nothing was run") and f"pid {holder.pid}" in status["job"]
    assert 'class="job job-busy"' in app.get("/thread/broken").text


@pytest.fixture
def from_python(own_runs) -> str:
    """A thread of `own_runs` that a library process ran into max_iterations: no saved model."""
    finished = library_process("run", str(own_runs), "from-python", "1", "0")
    assert json.loads(finished.communicate(timeout=60)[0])["finish_reason"] == "max_iterations"
    return "from-python"


def test_resuming_a_thread_started_from_python_needs_the_page_s_model(server, own_runs, from_python):
    app = client(own_runs, allow_actions=True, no_memory=True)
    token = token_of(app.get(f"/thread/{from_python}").text)
    refused = app.post(f"/resume/{from_python}", data={"token": token, "extra_iterations": "2"})
    assert refused.status_code == 409 and "was not started by the reinloop command" in refused.text
    assert "reinloop inspect --allow-actions --model MODEL" in refused.text and "--base-url" in refused.text
    assert "local extra" not in refused.text and app.get(f"/status/{from_python}").json()["job"] is None

    app = client(own_runs, allow_actions=True, no_memory=True, base_url=server.base_url)
    server.replies = ["Rested."]
    app.post(
        f"/resume/{from_python}", data={"token": token_of(app.get("/thread/broken").text), "extra_iterations": "2"}
    )
    assert wait_for_job(app, from_python)["job"] == "done answered"
    assert "Rested." in app.get(f"/thread/{from_python}").text


def test_the_command_passes_its_model_to_the_page(monkeypatch, runs):
    served = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **options: served.update(app=app))
    assert main(["inspect", "--db", str(runs), "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]) == 0
    jobs = next(route.endpoint.__self__.jobs for route in served["app"].routes if hasattr(route, "endpoint"))
    assert (jobs.model, jobs.base_url) == ("m", "http://127.0.0.1:9/v1")
