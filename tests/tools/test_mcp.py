"""Tools from MCP servers (`reinloop.tools.mcp`): the config file, one live session per server, calls under
invoke and ainvoke, failures (a server that does not start, dies mid-run, or is slow), clean closing, the
`reinloop` command's --mcp-config and `reinloop tools`, and REINLOOP_MCP_CONFIG of the served agent.

The servers are real, over stdio: tests/mcp_server.py (FastMCP) and mcp-server-time from PyPI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from reinloop import AgentConfig, ConfigurationError, build_agent
from reinloop import server as served
from reinloop.models import ChosenModel
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import ToolRegistry, is_async_tool
from tests.cli.test_cli import REINLOOP, cli, environment, run_args
from tests.openai_server import ScriptedOpenAIServer

pytest.importorskip("langchain_mcp_adapters")
pytest.importorskip("mcp_server_time")

from reinloop.tools import mcp_sessions
from reinloop.tools.mcp import MCPTool, MCPTools, load_mcp_config

TEST_SERVER = {"command": sys.executable, "args": [str(Path(__file__).parents[1] / "mcp_server.py")]}
TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
BOTH = {"test": {"transport": "stdio", **TEST_SERVER}, "time": {"transport": "stdio", **TIME_SERVER}}
TEST_ONLY = {"test": BOTH["test"]}


@pytest.fixture(scope="module")
def tools() -> Iterator[dict[str, MCPTool]]:
    """Both servers, open for the module: the tools by name."""
    with MCPTools(BOTH) as opened:
        yield {tool.name: tool for tool in opened}


def write_config(folder: Path, servers: dict[str, Any]) -> Path:
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def text(result: Any) -> str:
    """The text of an MCP tool's content blocks."""
    return "".join(block["text"] for block in result if block["type"] == "text")


def observations(model: ScriptedChatModel) -> list[str]:
    """Each observation the model was sent, in order (the window may have dropped some by the end)."""
    seen: dict[str, str] = {}
    for call in model.calls:
        for message in call.messages:
            if isinstance(message, ToolMessage):
                seen.setdefault(message.tool_call_id, str(message.content))
    return list(seen.values())


def children() -> set[int]:
    """This process's child processes (Linux: /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # ended while we looked
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def gone(pid: int) -> bool:
    """Whether the process has ended and been reaped."""
    return not Path(f"/proc/{pid}").exists()


def dead(pid: int) -> bool:
    """Whether the process has ended (a zombie not yet reaped, or gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def assert_quiet(err: str) -> None:
    """Nothing on stderr but what the servers may log: no traceback, warning, or asyncio complaint about a
    process it could not reap."""
    for sign in ("Traceback", "Warning", "Exception", "Error", "child process", "is closed"):
        assert sign not in err, err


def mcp_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "reinloop-mcp"}


# the config file ------------------------------------------------------------------------------------------


def test_a_config_file_becomes_the_adapters_connections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REINLOOP_TEST_TOKEN", "s3cret")
    servers = {
        "local": {
            "command": "uvx",
            "args": ["mcp-server-time"],
            "env": {"TOKEN": "${REINLOOP_TEST_TOKEN}"},
            "cwd": ".",
        },
        "bare": {"command": "my-server"},
        "typed": {"type": "stdio", "command": "my-server"},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
        "http": {"url": "https://example.com/mcp", "transport": "http"},
        "dashed": {"url": "https://example.com/mcp", "type": "streamable-http"},
        "events": {"url": "https://example.com/sse", "transport": "sse"},
        "socket": {"url": "wss://example.com/ws", "transport": "websocket"},
    }
    assert load_mcp_config(write_config(tmp_path, servers)) == {
        # The reference is left for the adapters to fill in (they do, from this environment).
        "local": {
            "transport": "stdio",
            "command": "uvx",
            "args": ["mcp-server-time"],
            "env": {"TOKEN": "${REINLOOP_TEST_TOKEN}"},
            "cwd": ".",
        },
        "bare": {"transport": "stdio", "command": "my-server", "args": []},
        "typed": {"transport": "stdio", "command": "my-server", "args": []},
        "remote": {
            "transport": "streamable_http",
            "url": "https://example.com/mcp",
            "headers": {"Authorization": "Bearer x"},
        },
        "http": {"transport": "streamable_http", "url": "https://example.com/mcp"},
        "dashed": {"transport": "streamable_http", "url": "https://example.com/mcp"},
        "events": {"transport": "sse", "url": "https://example.com/sse"},
        "socket": {"transport": "websocket", "url": "wss://example.com/ws"},
    }


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read the MCP config"),
        ("{not json", "is not valid JSON (Expecting property name enclosed in double quotes, line 1 column 2)"),
        ("[]", "names no server"),
        ('{"servers": {}}', "names no server"),
        ('{"mcpServers": {}}', "names no server"),
        ('{"mcpServers": {"x": "python server.py"}}', "server 'x': must be a JSON object"),
        ('{"mcpServers": {"x": {"args": []}}}', "server 'x': needs either \"command\""),
        ('{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}', "not both"),
        ('{"mcpServers": {"x": {"command": ""}}}', "'command' must be a non-empty string"),
        ('{"mcpServers": {"x": {"command": "a", "args": "b c"}}}', '"args" must be a list of strings'),
        ('{"mcpServers": {"x": {"command": "a", "args": [1]}}}', '"args" must be a list of strings'),
        ('{"mcpServers": {"x": {"command": "a", "env": ["K=V"]}}}', "'env' must be a JSON object of strings"),
        ('{"mcpServers": {"x": {"command": "a", "arg": ["b"]}}}', "unknown key 'arg'; such an entry takes command"),
        ('{"mcpServers": {"x": {"command": "a", "disabled": true}}}', "unknown key 'disabled'"),
        ('{"mcpServers": {"x": {"command": "a", "transport": "sse"}}}', "runs over stdio, not 'sse'"),
        ('{"mcpServers": {"x": {"url": "http://b", "transport": "stdio"}}}', '"transport" must be one of'),
        ('{"mcpServers": {"x": {"url": "http://b", "transport": 3}}}', '"transport" must be one of'),
        ('{"mcpServers": {"x": {"url": "ws://b", "transport": "websocket", "headers": {}}}}', 'takes no "headers"'),
        ('{"mcpServers": {"x": {"url": "http://b", "transport": "sse", "type": "sse"}}}', "not both"),
        ('{"mcpServers": {"": {"command": "a"}}}', "a server needs a name"),
        (
            '{"mcpServers": {"x": {"command": "a", "env": {"K": "${REINLOOP_TEST_UNSET}"}}}}',
            "env 'K' refers to ${REINLOOP_TEST_UNSET}, which is not set",
        ),
    ],
)
def test_every_problem_of_a_config_file_is_a_configuration_error_naming_it(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "mcp.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigurationError) as caught:
        load_mcp_config(path)
    assert str(path) in str(caught.value) and problem in str(caught.value)


def test_env_and_header_values_are_never_shown(tmp_path: Path) -> None:
    for servers in (
        {"x": {"command": "a", "env": {"TOKEN": 12345}}},
        {"x": {"url": "http://b", "headers": {"Authorization": 12345}}},
    ):
        with pytest.raises(ConfigurationError, match="must be a string, got a int") as caught:
            load_mcp_config(write_config(tmp_path, servers))
        assert "12345" not in str(caught.value)


@pytest.mark.parametrize(
    ("setting", "wrong"),
    [
        ("start_timeout_s", [0, float("inf")]),
        ("call_timeout_s", [0, float("inf")]),
        ("restart_backoff_s", [-1, float("nan"), float("inf")]),
        ("max_restarts", [-1, 1.5, True]),
    ],
)
def test_timeouts_and_restart_settings_must_be_in_range(setting: str, wrong: list[Any]) -> None:
    for value in wrong:
        with pytest.raises(ConfigurationError, match=setting):
            MCPTools(TEST_ONLY, **{setting: value})


# the tools ------------------------------------------------------------------------------------------------


def test_the_tools_keep_the_servers_names_schemas_and_metadata(tools: dict[str, MCPTool]) -> None:
    assert set(tools) == {
        "add",
        "fail",
        "slow",
        "stall",
        "stall_idempotent",
        "image",
        "pid",
        "crash",
        "shout",
        "get_current_time",
        "convert_time",
    }
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.args_schema == {
        "properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}},
        "required": ["a", "b"],
        "title": "addArguments",
        "type": "object",
    }
    assert add.response_format == "content_and_artifact" and add.server == "test"
    assert tools["get_current_time"].server == "time"
    assert (tools["get_current_time"].metadata or {})["readOnlyHint"] is True  # the MCP tool annotations
    assert tools["get_current_time"].args_schema["required"] == ["timezone"]  # type: ignore[index]
    assert all(is_async_tool(tool) for tool in tools.values())  # awaited on the loop under ainvoke


def test_a_call_works_under_invoke_and_ainvoke_and_keeps_its_artifact(tools: dict[str, MCPTool]) -> None:
    assert text(tools["add"].invoke({"a": 2, "b": 3})) == "5"
    assert text(asyncio.run(tools["add"].ainvoke({"a": 2, "b": 40}))) == "42"
    message = tools["add"].invoke({"type": "tool_call", "id": "c1", "name": "add", "args": {"a": 1, "b": 1}})
    assert isinstance(message, ToolMessage) and message.artifact == {"structured_content": {"result": 2}}


def test_an_mcp_error_result_keeps_the_adapters_handling(tools: dict[str, MCPTool]) -> None:
    message = tools["fail"].invoke({"type": "tool_call", "id": "c1", "name": "fail", "args": {"reason": "no"}})
    assert isinstance(message, ToolMessage) and message.status == "error"
    assert text(message.content) == "Error executing tool fail: failed on purpose: no"


def test_every_call_reaches_one_server_process_from_any_thread_or_loop(tools: dict[str, MCPTool]) -> None:
    pids = {text(tools["pid"].invoke({})) for _ in range(2)}
    pids.add(text(asyncio.run(tools["pid"].ainvoke({}))))
    from_threads: list[str] = []
    threads = [threading.Thread(target=lambda: from_threads.append(text(tools["pid"].invoke({})))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pids | set(from_threads)) == 1


def test_mcp_server_time_tells_the_time(tools: dict[str, MCPTool]) -> None:
    answer = json.loads(text(tools["get_current_time"].invoke({"timezone": "UTC"})))
    assert answer["timezone"] == "UTC" and answer["datetime"].endswith("+00:00")


def test_an_image_result_comes_back_as_an_image_block(tools: dict[str, MCPTool]) -> None:
    (block,) = tools["image"].invoke({})
    assert (block["type"], block["mime_type"]) == ("image", "image/png") and block["base64"].startswith("iVBOR")


# in an agent ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_an_agent_calls_mcp_tools_and_answers(tools: dict[str, MCPTool], mode: str) -> None:
    model = ScriptedChatModel(
        replies=[
            tool_call("add", {"a": 2, "b": 3}),
            tool_call("get_current_time", {"timezone": "UTC"}),
            tool_call("fail", {"reason": "on purpose"}),
            "2 + 3 = 5",
        ]
    )
    agent = build_agent(model, list(tools.values()), config=AgentConfig(tool_attempts=1))
    task = {"task": "What is 2 + 3?"}
    result = agent.invoke(task) if mode == "invoke" else asyncio.run(agent.ainvoke(task))
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "2 + 3 = 5")
    seen = observations(model)
    assert seen[0] == "5" and '"timezone":"UTC"' in seen[1].replace(" ", "")
    assert "failed on purpose: on purpose" in seen[2] and result["consecutive_errors"] == 1
    # The model was given the servers' own JSON schemas (LangChain leaves out their titles).
    bound = {tool["function"]["name"]: tool["function"]["parameters"] for tool in model.calls[0].tools}
    assert bound["add"]["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert bound["add"]["required"] == ["a", "b"]


def test_langchain_create_agent_runs_the_tools_under_invoke_which_the_adapters_tools_cannot(
    tools: dict[str, MCPTool],
) -> None:
    from langchain.agents import create_agent
    from langchain_mcp_adapters.client import MultiServerMCPClient

    def run(with_tools: list[Any]) -> dict[str, Any]:
        model = ScriptedChatModel(replies=[tool_call("add", {"a": 2, "b": 3}), "5"])
        return create_agent(model, with_tools).invoke({"messages": [("user", "What is 2 + 3?")]})

    adapters_tools = asyncio.run(MultiServerMCPClient(TEST_ONLY).get_tools())
    with pytest.raises(NotImplementedError, match="StructuredTool does not support sync invocation"):
        run(adapters_tools)
    assert text(run(list(tools.values()))["messages"][2].content) == "5"


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_arguments_are_checked_before_the_call(tools: dict[str, MCPTool], mode: str) -> None:
    model = ScriptedChatModel(replies=[tool_call("add", {"a": "two", "zzz": 1}), "gave up"])
    agent = build_agent(model, list(tools.values()))
    result = agent.invoke({"task": "2 + 3?"}) if mode == "invoke" else asyncio.run(agent.ainvoke({"task": "2 + 3?"}))
    (seen,) = observations(model)
    assert seen.startswith("Error: invalid arguments for 'add'") and "a: expected integer" in seen
    assert "b: missing (required)" in seen and "Expected add(a: integer, b: integer)" in seen
    # Refused before it ran: the server never saw the call, recorded as a call that failed validation.
    assert result["tool_attempts"] == 0
    assert [record["outcome"] for record in result["call_window"][0]] == ["invalid"]
    # The model's own mistake: its feedback, as an error observation, but no error of the streak.
    assert [message.status for message in result["messages"] if isinstance(message, ToolMessage)] == ["error"]
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 0)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_failing_mcp_calls_are_errors_that_end_the_streak_and_are_not_retried(
    tools: dict[str, MCPTool], mode: str
) -> None:
    # A tool that raises on the server and an unknown time zone: MCP error results, which the adapters would
    # hand over as content; each is an error for reinloop, the model's to fix (one run each, no retries).
    failing = [
        tool_call("fail", {"reason": f"try {n}"}) if n % 2 else tool_call("get_current_time", {"timezone": f"Mars/{n}"})
        for n in range(8)
    ]
    model = ScriptedChatModel(replies=[*failing, "gave up"])
    agent = build_agent(model, list(tools.values()), config=AgentConfig(tool_backoff_s=0.0, max_replans=0))
    result = agent.invoke({"task": "t"}) if mode == "invoke" else asyncio.run(agent.ainvoke({"task": "t"}))
    assert result["finish_reason"] == "error_streak"
    assert result["tool_attempts"] == result["consecutive_errors"] == len(observations(model)) + 1
    assert all(seen.startswith("Error: ") for seen in observations(model))


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_slow_tool_hits_the_tool_timeout_and_the_run_goes_on(tools: dict[str, MCPTool], mode: str) -> None:
    replies = [tool_call("slow", {"seconds": 5}), tool_call("add", {"a": 1, "b": 2}), tool_call("slow", {"seconds": 6})]
    model = ScriptedChatModel(replies=[*replies, "3"])
    agent = build_agent(model, list(tools.values()), config=AgentConfig(tool_timeout_s=0.5, tool_attempts=1))
    started = time.monotonic()
    result = agent.invoke({"task": "t"}) if mode == "invoke" else asyncio.run(agent.ainvoke({"task": "t"}))
    assert time.monotonic() - started < 4
    slow, add, slow_again = observations(model)
    assert "'slow' gave no result within 0.5 s" in slow and add == "3" and "within 0.5 s" in slow_again
    # The server answered add while the abandoned call still slept; the last timeout counts for the streak.
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 1)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
@pytest.mark.parametrize(
    ("name", "runs", "told"),
    [
        ("stall", 1, "Error: 'stall' gave no result within 0.5 s, so this call may or may not have had its effect."),
        ("stall_idempotent", 3, "Error: 'stall_idempotent' gave no result within 0.5 s (3 attempts)."),
    ],
    ids=["unannotated-runs-once-in-doubt", "annotated-idempotent-retried"],
)
def test_a_stalled_mcp_tool_runs_once_in_doubt_unless_annotated_idempotent(
    tools: dict[str, MCPTool], tmp_path: Path, mode: str, name: str, runs: int, told: str
) -> None:
    ledger = tmp_path / "ledger"
    model = ScriptedChatModel(replies=[tool_call(name, {"ledger": str(ledger), "seconds": 3}), "done"])
    settings = AgentConfig(tool_timeout_s=0.5, tool_backoff_s=0.0, tool_attempts=3)
    agent = build_agent(model, list(tools.values()), config=settings)
    result = agent.invoke({"task": "t"}) if mode == "invoke" else asyncio.run(agent.ainvoke({"task": "t"}))
    # Each run on the server appends its line before it stalls.
    assert len(ledger.read_text().splitlines()) == runs and result["tool_attempts"] == runs
    (seen,) = observations(model)
    assert seen.startswith(told)
    assert ("check whether it took effect" in seen) is (runs == 1)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "done")


def test_mcp_tools_are_retryable_only_when_annotated_read_only_or_idempotent(tools: dict[str, MCPTool]) -> None:
    registry = ToolRegistry(tools.values())
    retryable = {entry.name for entry in registry if entry.retryable}
    # pid, get_current_time and convert_time are annotated readOnlyHint (the last two by mcp-server-time).
    assert retryable == {"stall_idempotent", "pid", "get_current_time", "convert_time"}
    # Whether a call in flight at a crash runs again is as before: idempotent unless declared otherwise.
    assert all(entry.idempotent for entry in registry)


# failures and closing -------------------------------------------------------------------------------------


def test_closing_is_clean_and_ends_the_servers(capfd: pytest.CaptureFixture[str]) -> None:
    before, threads = children(), mcp_threads()
    with MCPTools(BOTH) as opened:
        started = children() - before
        by_name = {tool.name: tool for tool in opened}
        assert int(text(by_name["pid"].invoke({}))) in started and len(started) == 2
        by_name["slow"].invoke({"seconds": 0.01})
        asyncio.run(by_name["get_current_time"].ainvoke({"timezone": "UTC"}))
    assert all(gone(pid) for pid in started) and mcp_threads() == threads
    with pytest.raises(RuntimeError, match="the session of MCP server 'test' is closed"):
        by_name["add"].invoke({"a": 1, "b": 2})
    assert_quiet(capfd.readouterr().err)


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"command": "/nonexistent/mcp-server"}, "FileNotFoundError"),
        ({"command": sys.executable, "args": ["-c", "pass"]}, "it closed the connection before answering"),
        ({"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}, "did not answer within 0.5 s"),
    ],
    ids=["bad-command", "exits-at-once", "never-answers"],
)
def test_a_server_that_does_not_start_fails_fast_naming_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], server: dict[str, Any], problem: str
) -> None:
    before, threads = children(), mcp_threads()
    path = write_config(tmp_path, {"broken": server})
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as caught, MCPTools(path, start_timeout_s=0.5):
        pass
    # mcp gives a server 2 s to exit once its input is closed, then terminates it.
    assert time.monotonic() - started < 4
    assert f"MCP server 'broken' of the MCP config {path} did not start: " in str(caught.value)
    assert problem in str(caught.value)
    assert children() <= before and mcp_threads() == threads
    assert_quiet(capfd.readouterr().err)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The restarts' backoff waits, recorded instead of waited, on a clock that stands still."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(mcp_sessions, "apause", record)
    monkeypatch.setattr(mcp_sessions, "now", lambda: 1000.0)
    return waits


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    while not dead(pid):
        time.sleep(0.01)


def after_a_kill(call: Callable[[dict[str, Any]], Any], args: dict[str, Any]) -> Any:
    """`call` of a tool whose server was just killed. A call sent within milliseconds of the death may reach mcp
    before the private loop has read the end of the server's output: it fails in doubt (a plain
    ConnectionError), and the next call starts the server again."""
    try:
        return call(args)
    except ConnectionError as exc:
        if isinstance(exc, ConnectionRefusedError):
            raise
    return call(args)


def run(agent: Any, mode: str) -> dict[str, Any]:
    return agent.invoke({"task": "t"}) if mode == "invoke" else asyncio.run(agent.ainvoke({"task": "t"}))


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_server_killed_mid_run_is_started_again_at_the_next_call_and_its_tools_work(
    capfd: pytest.CaptureFixture[str], pauses: list[float], mode: str
) -> None:
    before = children()
    with MCPTools(BOTH) as opened:
        server_pid = int(text(next(tool for tool in opened if tool.name == "pid").invoke({})))
        # pid is read-only, so safe to repeat: if it is sent within milliseconds of the death, before the private
        # loop has read the end of the server's output, it fails in doubt and its retry starts the server again.
        replies = iter([tool_call("add", {"a": 0, "b": 1}), tool_call("pid", {}), tool_call("add", {"a": 1, "b": 1})])

        def respond(messages: list[BaseMessage]) -> Any:
            if len(model.calls) == 2:  # the first call has answered: the server dies before the next one
                kill(server_pid)
            return next(replies, "counted")

        model = ScriptedChatModel(respond=respond, max_calls=4)
        agent = build_agent(model, opened, config=AgentConfig(tool_backoff_s=0.0))
        started = time.monotonic()
        result = run(agent, mode)
        assert time.monotonic() - started < 5
        assert len(children() - before) == 2  # the new test server and the time server
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 0)
    first, new_pid, second = observations(model)
    assert (first, second) == ("1", "2") and int(new_pid) != server_pid
    assert pauses == [0.5]  # restart_backoff_s after the death, the first restart's backoff
    assert gone(server_pid) and gone(int(new_pid)) and children() <= before
    assert_quiet(capfd.readouterr().err)


@pytest.mark.parametrize(
    ("name", "runs", "told"),
    [
        ("stall", 1, "Error: 'stall' failed without an answer: ConnectionError: the connection to MCP server 'test'"),
        ("stall_idempotent", 2, "recorded, then slept 0.5 s"),
    ],
    ids=["unannotated-in-doubt-not-sent-again", "annotated-idempotent-retried-on-the-new-server"],
)
def test_a_call_in_flight_when_its_server_dies_is_sent_again_only_if_safe_to_repeat(
    tmp_path: Path, pauses: list[float], name: str, runs: int, told: str
) -> None:
    ledger = tmp_path / "ledger"

    def kill_once_it_ran() -> None:
        while not ledger.exists():
            time.sleep(0.01)
        kill(int(ledger.read_text().split()[0]))

    with MCPTools(TEST_ONLY) as opened:
        killer = threading.Thread(target=kill_once_it_ran)
        killer.start()
        model = ScriptedChatModel(replies=[tool_call(name, {"ledger": str(ledger), "seconds": 0.5}), "done"])
        settings = AgentConfig(tool_backoff_s=0.0, tool_attempts=3)
        result = build_agent(model, opened, config=settings).invoke({"task": "t"})
        killer.join()
    assert len(ledger.read_text().split()) == runs and result["tool_attempts"] == runs
    (seen,) = observations(model)
    assert seen.startswith(told), seen


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_server_that_keeps_dying_is_started_again_at_most_max_restarts_times_then_the_guards_end_the_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], pauses: list[float], mode: str
) -> None:
    ledger, before = tmp_path / "ledger", children()
    with MCPTools(TEST_ONLY, max_restarts=1) as opened:
        model = ScriptedChatModel(
            respond=lambda messages: tool_call("crash", {"ledger": str(ledger), "attempt": len(model.calls)}),
            max_calls=20,
        )
        started = time.monotonic()
        result = run(build_agent(model, opened), mode)
        assert time.monotonic() - started < 10
    assert result["finish_reason"] == "error_streak"
    # The first server and its one restart each ran one call, which ended it, after its backoff.
    assert len(set(ledger.read_text().split())) == 2 and pauses == [0.5]
    lost, lost_again, refused, *circuit_open = observations(model)
    for seen in (lost, lost_again):
        assert "failed without an answer: ConnectionError: the connection to MCP server 'test' is closed" in seen
        assert "may or may not have had its effect" in seen
    assert refused == (
        "Error: 'crash' failed: ConnectionRefusedError: MCP server 'test' died and is not started again: it was "
        "started again 1 time in this block already (max_restarts=1); this call was not sent. Change the arguments "
        "or the tool."
    )
    # Then the tool circuit refuses the calls, and the error streak ends the run.
    assert circuit_open and all(seen.startswith("Error: not run: 'crash' is unavailable") for seen in circuit_open)
    assert children() <= before
    assert_quiet(capfd.readouterr().err)


def test_a_server_that_cannot_start_again_is_tried_max_restarts_times_with_backoff(
    tmp_path: Path, pauses: list[float]
) -> None:
    once = {"transport": "stdio", **TEST_SERVER, "args": [*TEST_SERVER["args"], "--once", str(tmp_path / "started")]}
    with MCPTools({"once": once}, max_restarts=2, restart_backoff_s=0.25) as opened:
        by_name = {tool.name: tool for tool in opened}
        kill(int(text(by_name["pid"].invoke({}))))
        failed = "MCP server 'once' died and did not start again: it closed the connection before answering"
        with pytest.raises(ConnectionRefusedError, match=failed):
            after_a_kill(by_name["add"].invoke, {"a": 1, "b": 2})
        with pytest.raises(ConnectionRefusedError, match=failed):
            asyncio.run(by_name["add"].ainvoke({"a": 1, "b": 2}))
        started = time.monotonic()
        with pytest.raises(
            ConnectionRefusedError, match=r"started again 2 times in this block already \(max_restarts=2\)"
        ):
            by_name["add"].invoke({"a": 1, "b": 2})
        assert time.monotonic() - started < 0.5
    assert pauses == [0.25, 0.5]


def test_closing_while_a_restart_waits_out_its_backoff_is_quick_and_quiet(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = threading.Event()

    async def long_pause(seconds: float) -> None:
        waiting.set()
        await asyncio.sleep(seconds)

    monkeypatch.setattr(mcp_sessions, "apause", long_pause)
    before, threads, outcome = children(), mcp_threads(), []
    with MCPTools(TEST_ONLY, restart_backoff_s=60) as opened:
        by_name = {tool.name: tool for tool in opened}
        kill(int(text(by_name["pid"].invoke({}))))

        def call() -> None:
            try:
                after_a_kill(by_name["add"].invoke, {"a": 1, "b": 2})
            except Exception as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        assert waiting.wait(10)
        started = time.monotonic()
    caller.join(5)
    assert time.monotonic() - started < 3 and not caller.is_alive()
    (raised,) = outcome
    assert isinstance(raised, RuntimeError) and "the session of MCP server 'test' is closed" in str(raised)
    assert children() <= before and mcp_threads() == threads
    assert_quiet(capfd.readouterr().err)


def test_a_server_that_writes_junk_to_stdout_works_and_is_logged_once_without_a_traceback(tmp_path: Path) -> None:
    junk = {"transport": "stdio", **TEST_SERVER, "args": [*TEST_SERVER["args"], "--junk"]}
    script = f"""
import asyncio
from reinloop.tools.mcp import MCPTools
with MCPTools({{"junk": {junk!r}}}) as tools:
    by_name = {{tool.name: tool for tool in tools}}
    print(by_name["shout"].invoke({{"words": "hello"}})[0]["text"])
    print(asyncio.run(by_name["shout"].ainvoke({{"words": "again"}}))[0]["text"])
    print(by_name["add"].invoke({{"a": 2, "b": 3}})[0]["text"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.split()) == (0, ["hello", "again", "5"]), done.stderr
    # Python's last-resort handler prints the one record: its message alone.
    assert done.stderr.splitlines() == [
        "MCP server 'junk' wrote a line to its stdout that is not a JSON-RPC message; it is ignored, as are any "
        "later ones (not reported again): 'starting the junk server'"
    ]


def test_a_call_waits_at_most_call_timeout_s_and_the_server_goes_on() -> None:
    with MCPTools(TEST_ONLY, call_timeout_s=0.3) as opened:
        by_name = {tool.name: tool for tool in opened}
        for call in (by_name["slow"].invoke, lambda args: asyncio.run(by_name["slow"].ainvoke(args))):
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=r"MCP server 'test' gave no answer for 'slow' within 0\.3 s"):
                call({"seconds": 5})
            assert time.monotonic() - started < 1
        assert text(by_name["add"].invoke({"a": 1, "b": 2})) == "3"


def test_two_servers_with_one_tool_name_need_prefixes(capfd: pytest.CaptureFixture[str]) -> None:
    twins, before, threads = {"one": BOTH["test"], "two": BOTH["test"]}, children(), mcp_threads()
    named = "MCP servers 'one' and 'two' both have a tool named 'add'"
    with pytest.raises(ConfigurationError, match=named), MCPTools(twins):
        pass
    assert children() <= before and mcp_threads() == threads
    assert_quiet(capfd.readouterr().err)
    with MCPTools(twins, tool_name_prefix=True) as opened:
        by_name = {tool.name: tool for tool in opened}
        assert {"one_add", "two_add", "one_pid", "two_pid"} <= set(by_name)
        assert text(by_name["two_add"].invoke({"a": 1, "b": 2})) == "3"
        assert text(by_name["one_pid"].invoke({})) != text(by_name["two_pid"].invoke({}))


# the command and the served agent -------------------------------------------------------------------------


def test_the_tools_command_lists_each_tool_with_its_source(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"test": TEST_SERVER, "time": TIME_SERVER})
    done = cli("tools", "--mcp-config", str(path), "--workspace", "ws", home=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for signature, source in [
        ("calculator(expression: string)", "built-in"),
        ("add(a: integer, b: integer)", "MCP server test"),
        ("get_current_time(timezone: string)", "MCP server time"),
    ]:
        assert any(signature in line and source in line for line in lines), done.stdout

    broken = write_config(tmp_path, {"test": TEST_SERVER, "broken": {"command": "/nonexistent/mcp-server"}})
    failed = cli("tools", "--mcp-config", str(broken), home=tmp_path)
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines() == [
        f"error: MCP server 'broken' of the MCP config {broken} did not start: FileNotFoundError: [Errno 2] No "
        "such file or directory: '/nonexistent/mcp-server'"
    ]


def test_run_with_mcp_config_runs_end_to_end_and_resume_starts_the_same_servers(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"test": TEST_SERVER, "time": TIME_SERVER})
    with ScriptedOpenAIServer() as server:
        server.replies = [{"tool": "add", "args": {"a": 2, "b": 3}}]
        args = run_args(server, "--thread", "m1", "--max-iterations", "1", "--mcp-config", path.name)
        stopped = cli("run", "What is 2 + 3?", *args, home=tmp_path)
        assert stopped.returncode == 3, stopped.stderr  # max_iterations: resumed below
        assert "✓ add: 5" in stopped.stdout
        assert_quiet(stopped.stderr)
        assert "get_current_time" in {tool["function"]["name"] for tool in server.requests[0]["tools"]}

        # From another folder: the run saved the config's absolute path.
        server.replies = [{"tool": "get_current_time", "args": {"timezone": "UTC"}}, "2 + 3 = 5"]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        resumed = subprocess.run([REINLOOP, "resume", "m1", "--no-memory", "--extra-iterations", "2"],
                                 capture_output=True, text=True, timeout=120, env=environment(tmp_path),
                                 cwd=elsewhere, check=False)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert "✓ get_current_time" in resumed.stdout and "2 + 3 = 5" in resumed.stdout
        assert_quiet(resumed.stderr)


def test_the_served_agent_adds_the_tools_of_reinloop_mcp_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith(("REINLOOP_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("REINLOOP_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("REINLOOP_TOOLS", "calculator")
    monkeypatch.setenv("REINLOOP_MCP_CONFIG", str(write_config(tmp_path, {"test": TEST_SERVER})))
    monkeypatch.setenv("REINLOOP_MCP_PREFIX", "true")
    monkeypatch.setenv("REINLOOP_APPROVE", "test_add")
    model = ScriptedChatModel(replies=[tool_call("test_add", {"a": 2, "b": 3}), "5"])
    chosen = ChosenModel(model, "scripted", "tool_calling")
    monkeypatch.setattr(served, "model_from_settings", lambda *settings: nullcontext(chosen))
    before = children()
    with ExitStack() as resources:
        agent = served.agent_from_environment(resources)
        # As LangGraph Server does: the served graph with the platform's checkpointer.
        running, thread = agent.copy(update={"checkpointer": InMemorySaver()}), {"configurable": {"thread_id": "t"}}
        (waiting,) = running.invoke({"task": "2 + 3?"}, thread)["__interrupt__"]  # the MCP tool waits too
        assert waiting.value["name"] == "test_add"
        result = running.invoke(Command(resume={"action": "approve"}), thread)
        assert observations(model) == ["5"] and result["final_answer"] == "5"
        assert [tool["function"]["name"] for tool in model.calls[0].tools][:2] == ["calculator", "test_add"]
        started = children() - before
        assert len(started) == 1
    assert all(gone(pid) for pid in started)  # closed with the resources, at process exit when served

    monkeypatch.setenv("REINLOOP_MCP_PREFIX", "sometimes")
    with ExitStack() as resources, pytest.raises(ConfigurationError, match="REINLOOP_MCP_PREFIX='sometimes'"):
        served.agent_from_environment(resources)
