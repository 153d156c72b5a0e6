"""LangGraph Server: `langgraph dev` serves reinloop agents, driven through langgraph-sdk and a RemoteGraph.

One server for the module, on a free loopback port, offline: the scripted agent of tests/server_graph.py,
and the repository's own langgraph.json entry (reinloop.server) with its model on a scripted
OpenAI-compatible server named by the environment settings.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph

from reinloop import AgentConfig, ConfigurationError, ResumeError, preset, resume
from reinloop import server as served
from reinloop.models import ChosenModel
from reinloop.testing import ScriptedChatModel
from tests.openai_server import ScriptedOpenAIServer
from tests.server_graph import MAX_ITERATIONS
from tests.test_readme import FENCE

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 120.0
SCRIPTED = "scripted"  # the graph of tests/server_graph.py
APPROVING = "approving"  # its twin that asks before each call
DEPLOYED = "reinloop"  # the repository's langgraph.json entry
# The deployed agent's settings; its model replies what each test scripts.
DEPLOYED_ENV = {"REINLOOP_TOOLS": "calculator", "REINLOOP_MAX_ITERATIONS": "4"}
DEPLOY_PAGE_URL = "http://127.0.0.1:2024"  # where the Deploy blocks of docs/deploy.md find the server
# No network at run time: no CLI analytics, no PyPI version check, no LangSmith tracing (and no browser).
OFFLINE_ENV = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true", "LANGSMITH_TRACING": "false"}


@dataclass(frozen=True)
class Server:
    url: str
    model: ScriptedOpenAIServer  # the deployed agent's model

    def remote(self, graph: str = SCRIPTED) -> RemoteGraph:
        return RemoteGraph(graph, url=self.url)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if importlib.util.find_spec("langgraph_cli") is None or importlib.util.find_spec("langgraph_api") is None:
        pytest.skip("langgraph-cli[inmem] is not installed (it is in the dev extra)")
    folder = tmp_path_factory.mktemp("langgraph-server")
    deployed = json.loads((ROOT / "langgraph.json").read_text())["graphs"][DEPLOYED]
    config = {"dependencies": [str(ROOT)],
              "graphs": {SCRIPTED: f"{ROOT}/tests/server_graph.py:agent", DEPLOYED: deployed,
                         APPROVING: f"{ROOT}/tests/server_graph.py:approving"}}  # fmt: skip
    (folder / "langgraph.json").write_text(json.dumps(config))
    port = _free_port()
    with ScriptedOpenAIServer() as model, (folder / "server.log").open("wb") as log:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("REINLOOP_", "OPENAI_"))}
        env.update(OFFLINE_ENV, **DEPLOYED_ENV, REINLOOP_BASE_URL=model.base_url,
                   REINLOOP_WORKSPACE=str(folder / "workspace"),
                   PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))  # fmt: skip
        command = [sys.executable, "-m", "langgraph_cli", "dev", "--no-browser", "--no-reload",
                   "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        # Its own session, so that the finalizer stops the server and anything it started.
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_until_healthy(process, url, folder / "server.log")
            yield Server(url, model)
        finally:
            _stop(process)


def _wait_until_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"langgraph dev exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/ok", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"langgraph dev was not healthy within {STARTUP_TIMEOUT_S:g} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _thread(thread_id: str | None = None) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id or str(uuid.uuid4())}}


# through langgraph-sdk ------------------------------------------------------------------------------------


def test_a_run_streams_updates_and_messages_and_leaves_state_and_history(server: Server) -> None:
    from langgraph_sdk import get_client

    async def run() -> tuple[list[Any], dict[str, Any], list[dict[str, Any]]]:
        client = get_client(url=server.url)
        thread = await client.threads.create()
        parts = [
            part
            async for part in client.runs.stream(
                thread["thread_id"], SCRIPTED, input={"task": "Add up 1 2 3"}, stream_mode=["updates", "messages"]
            )
        ]
        state = await client.threads.get_state(thread["thread_id"])
        history = await client.threads.get_history(thread["thread_id"], limit=100)
        return parts, state, history

    parts, state, history = asyncio.run(run())

    nodes = [node for part in parts if part.event == "updates" for node in part.data]
    assert nodes == 2 * ["decide", "validate_args", "execute_tool", "observe", "compress_memory", "check_finish"] + [
        "decide",
        "validate_args",
        "check_finish",
    ]
    streamed = [part.data[0] for part in parts if part.event == "messages/complete"]
    assert [(message["type"], message["content"]) for message in streamed] == [
        ("ai", ""), ("tool", "3"), ("ai", ""), ("tool", "6"), ("ai", "The sum is 6."),
    ]  # fmt: skip
    assert [call["args"] for message in streamed for call in message.get("tool_calls") or []] == [
        {"a": 1, "b": 2},
        {"a": 3, "b": 3},
    ]

    values = state["values"]
    assert (values["finish_reason"], values["final_answer"], values["iteration"]) == ("answered", "The sum is 6.", 3)
    assert state["next"] == []
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    # Every step was checkpointed: the input, then one checkpoint per node step (the two calls' rounds have
    # six steps, the answering round three).
    assert len(history) == 1 + 1 + 2 * 6 + 3
    assert [entry["next"] for entry in history[-2:]] == [["decide"], ["__start__"]]


def test_a_call_waits_on_the_server_for_a_person_and_runs_as_they_edit_it(server: Server) -> None:
    from langgraph_sdk import get_client

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        client = get_client(url=server.url)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, APPROVING, input={"task": "Add up 1 2"})
        waiting = await client.threads.get_state(thread)
        edit = {"action": "edit", "args": {"a": 1, "b": 5}}
        await client.runs.wait(thread, APPROVING, command={"resume": edit})
        return waiting, await client.threads.get_state(thread)

    waiting, done = asyncio.run(run())

    (request,) = [interrupt["value"] for task in waiting["tasks"] for interrupt in task["interrupts"]]
    assert (request["type"], request["name"], request["args"]) == ("tool_approval", "add", {"a": 1, "b": 2})
    assert waiting["next"] == ["validate_args"] and waiting["values"].get("tool_results") == []
    assert (done["values"]["finish_reason"], done["values"]["final_answer"]) == ("answered", "The sum is 6.")


def test_the_input_schema_asks_for_the_task(server: Server) -> None:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server.url)
    (assistant,) = client.assistants.search(graph_id=SCRIPTED)
    schemas = client.assistants.get_schemas(assistant["assistant_id"])
    assert schemas["input_schema"]["required"] == ["task"]
    assert "final_answer" in schemas["output_schema"]["properties"]


def test_twenty_threads_run_concurrently_each_with_its_own_answer(server: Server) -> None:
    from langgraph_sdk import get_client

    async def run_all() -> list[tuple[dict[str, Any], dict[str, Any]]]:
        client = get_client(url=server.url)

        async def run(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
            thread = await client.threads.create()
            final = await client.runs.wait(thread["thread_id"], SCRIPTED, input={"task": f"Add up {n} {n + 1} 100"})
            return final, (await client.threads.get_state(thread["thread_id"]))["values"]

        return await asyncio.gather(*(run(n) for n in range(20)))

    results = asyncio.run(run_all())

    for n, (final, saved) in enumerate(results):
        expected = f"The sum is {2 * n + 101}."
        assert (final["finish_reason"], final["final_answer"]) == ("answered", expected)
        assert (saved["final_answer"], saved["iteration"]) == (expected, 3)


# resume through a RemoteGraph -----------------------------------------------------------------------------


def test_resume_continues_a_remote_thread_after_a_break_with_a_fresh_budget_and_a_hint(server: Server) -> None:
    agent, thread = server.remote(), _thread()
    task = {"task": "Add up 1 2 3 4 5 6"}  # five calls and an answer: six rounds

    stopped = agent.invoke(task, thread)
    assert (stopped["finish_reason"], stopped["iteration"], stopped["final_answer"]) == (
        "max_iterations",
        MAX_ITERATIONS,
        None,
    )

    # A fresh budget of exactly the rounds given: one more round, and the breaker trips again.
    again = resume(agent, thread, extra_iterations=1)
    assert (again["finish_reason"], again["iteration"]) == ("max_iterations", MAX_ITERATIONS + 1)

    finished = resume(agent, thread, extra_iterations=5, hint="Answer once the numbers are added up.")
    assert (finished["finish_reason"], finished["iteration"]) == ("answered", 6)
    assert finished["final_answer"] == "The sum is 21. Hint seen: Answer once the numbers are added up."
    assert agent.get_state(thread).values["final_answer"] == finished["final_answer"]

    with pytest.raises(ResumeError, match="already answered"):
        resume(agent, thread, extra_iterations=5)


def test_resume_of_a_remote_thread_that_is_unknown_or_never_ran_is_refused(server: Server) -> None:
    from langgraph_sdk import get_sync_client

    agent = server.remote()
    with pytest.raises(ResumeError, match="no saved state"):
        resume(agent, _thread(), extra_iterations=5)
    created = get_sync_client(url=server.url).threads.create()
    with pytest.raises(ResumeError, match="has not run yet"):
        resume(agent, _thread(created["thread_id"]), extra_iterations=5)


# the repository's langgraph.json ----------------------------------------------------------------------------


def _script(server: Server, *replies: Any) -> int:
    """Queue the deployed agent's model replies; returns how many requests it had before."""
    server.model.replies[:] = replies
    return len(server.model.requests)


def _calculate(expression: str) -> dict[str, Any]:
    return {"tool": "calculator", "args": {"expression": expression}}


def test_the_deployed_agent_takes_its_model_tools_and_limits_from_the_environment(server: Server) -> None:
    before = _script(server, _calculate("23 * 19"), "23 * 19 = 437")
    final = server.remote(DEPLOYED).invoke({"task": "What is 23 * 19?"}, _thread())

    assert (final["finish_reason"], final["final_answer"]) == ("answered", "23 * 19 = 437")
    assert final["messages"][1]["content"] == "437"  # the calculator ran on the server
    # REINLOOP_MAX_ITERATIONS=4, less the round of the call (the answering round is not counted down).
    assert (final["iteration"], final["iterations_left"]) == (2, 3)
    sent = server.model.requests[before]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["calculator"]


def test_the_deploy_page_blocks_run_against_the_server(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    blocks = [body for _, info, body in FENCE.findall(deploy) if "server" in info.split()]
    assert len(blocks) == 2
    _script(server, _calculate("23 * 19"), "23 * 19 = 437", _calculate("23 * 19"), _calculate("437 + 1"),
            "23 * 19 + 1 = 438")  # fmt: skip
    namespace: dict[str, Any] = {"__name__": "deploy_page"}
    for number, body in enumerate(blocks, 1):
        assert DEPLOY_PAGE_URL in body
        exec(compile(body.replace(DEPLOY_PAGE_URL, server.url), f"docs/deploy.md block {number}", "exec"), namespace)

    printed = capsys.readouterr().out
    assert "answered 23 * 19 = 437\n" in printed and "step_limit 1\n" in printed
    assert "answered 23 * 19 + 1 = 438\n" in printed
    assert namespace["history"][0]["values"]["final_answer"] == "23 * 19 = 437"
    assert not server.model.replies


# reinloop.server without a server --------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith(("REINLOOP_", "OPENAI_")):
            monkeypatch.delenv(key)
    return monkeypatch


def test_config_comes_from_the_model_then_each_setting(clean_env: pytest.MonkeyPatch) -> None:
    chosen = ChosenModel(ScriptedChatModel(), "local", "json", {"context_token_budget": 3_400, "recall_k": 0})
    clean_env.setenv("REINLOOP_MAX_ITERATIONS", "7")
    clean_env.setenv("REINLOOP_ERROR_REFLECTION", "false")
    clean_env.setenv("REINLOOP_RECALL_K", "3")

    assert served.config_from_environment(chosen) == AgentConfig(
        protocol="json", context_token_budget=3_400, max_iterations=7, error_reflection=False, recall_k=3
    )
    clean_env.setenv("REINLOOP_MAX_ITERATIONS", "none")
    with pytest.raises(ConfigurationError, match="max_iterations"):
        served.config_from_environment(chosen)


def test_a_preset_is_the_base_the_model_and_each_setting_go_over(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("OPENAI_API_KEY", "test-key")  # the default model string, built without a call
    clean_env.setenv("REINLOOP_WORKSPACE", str(tmp_path))
    clean_env.setenv("REINLOOP_TOOLS", "calculator")
    clean_env.setenv("REINLOOP_PRESET", "seed_004")
    clean_env.setenv("REINLOOP_MAX_ITERATIONS", "12")
    asked = []

    def model_from_settings(model: Any, base_url: Any, protocol: Any) -> Any:
        asked.append(protocol)
        return original(model, base_url, protocol)

    original = served.model_from_settings
    clean_env.setattr(served, "model_from_settings", model_from_settings)
    with ExitStack() as resources:
        served.agent_from_environment(resources)
    assert asked == ["call_tool"]  # the model is set up for the preset's protocol
    expected = AgentConfig(**{**preset("seed-004").model_dump(exclude_unset=True), "max_iterations": 12})
    chosen = ChosenModel(ScriptedChatModel(), "openai", "call_tool")
    assert served.config_from_environment(chosen) == expected  # the preset's loop rule and the rest
    clean_env.setenv("REINLOOP_PROTOCOL", "react")  # a protocol named goes over the preset's
    assert served.config_from_environment(ChosenModel(ScriptedChatModel(), "openai", "react")).protocol == "react"


@pytest.mark.parametrize(
    ("tools", "problem"), [("calculator,telepathy", "unknown tools 'telepathy'"), (" , ", "names no tool")]
)
def test_unknown_tool_settings_are_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, tools: str, problem: str
) -> None:
    clean_env.setenv("OPENAI_API_KEY", "test-key")  # the default model string, built without a call
    clean_env.setenv("REINLOOP_WORKSPACE", str(tmp_path))
    clean_env.setenv("REINLOOP_TOOLS", tools)
    with ExitStack() as resources, pytest.raises(ConfigurationError, match=f"{problem}.*choose from web_search, calc"):
        served.agent_from_environment(resources)


def test_make_agent_builds_the_agent_once(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setattr(served, "_served", [])
    clean_env.setenv("OPENAI_API_KEY", "test-key")
    clean_env.setenv("REINLOOP_WORKSPACE", str(tmp_path))
    clean_env.setenv("REINLOOP_TOOLS", "calculator")

    async def twice() -> tuple[Any, Any]:
        return await asyncio.gather(served.make_agent(), served.make_agent())

    first, second = asyncio.run(twice())
    assert first is second
    assert first.checkpointer is True and first.store is None  # the platform gives each at run time
    assert set(first.nodes) >= {"decide", "execute_tool", "check_finish"}


def test_approvals_named_in_the_environment_stop_the_served_agent_for_a_person(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from contextlib import nullcontext

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from reinloop.testing import tool_call

    clean_env.setenv("REINLOOP_WORKSPACE", str(tmp_path))
    clean_env.setenv("REINLOOP_TOOLS", "calculator,web_search")
    clean_env.setenv("REINLOOP_APPROVE", "calculator")
    model = ScriptedChatModel(replies=[tool_call("calculator", {"expression": "2 + 2"}), "4"])
    chosen = ChosenModel(model, "scripted", "tool_calling")
    clean_env.setattr(served, "model_from_settings", lambda *settings: nullcontext(chosen))
    with ExitStack() as resources:
        agent = served.agent_from_environment(resources)
    # As LangGraph Server does: the served graph with the platform's checkpointer.
    running, thread = agent.copy(update={"checkpointer": InMemorySaver()}), _thread()
    (waiting,) = running.invoke({"task": "2 + 2?"}, thread)["__interrupt__"]
    assert (waiting.value["name"], waiting.value["args"]) == ("calculator", {"expression": "2 + 2"})
    done = running.invoke(Command(resume={"action": "approve"}), thread)
    assert (done["finish_reason"], done["final_answer"]) == ("answered", "4")

    clean_env.setenv("REINLOOP_APPROVE", "calculator,telepathy")
    with ExitStack() as resources, pytest.raises(ConfigurationError, match=r"REINLOOP_APPROVE=.*'telepathy'"):
        served.agent_from_environment(resources)
