"""The embedded model end to end: llama-cpp-python's server on 127.0.0.1 with the bundled Gemma 3 270M,
driven through ChatOpenAI. Slow (a model call takes seconds); CI runs it."""

import os

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
