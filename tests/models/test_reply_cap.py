"""A reply never runs away: every model reinloop sets up carries a cap on its reply, a reply cut at a limit is
never acted on, and every reply's tokens count towards the run's budget. End to end against an
OpenAI-compatible HTTP server whose model never stops generating."""

import json

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.cli import EXIT_CODES, main
from reinloop.config import DEFAULT_REPLY_TOKENS
from reinloop.graph import agent_topology
from reinloop.memory.tokens import TokenCounter
from reinloop.memory.usage import call_usage
from reinloop.models import openai_compatible_model, resolve_model
from reinloop.protocols import PROTOCOLS as REGISTERED
from reinloop.testing import ScriptedChatModel, cut_reply, json_action, tool_call
from reinloop.tools import ToolRegistry
from reinloop.tools.toolset import default_toolset
from tests.conftest import add, new_thread
from tests.openai_server import RUNAWAY_DECISION, RunawayOpenAIServer

PROTOCOLS = ["tool_calling", "json", "react", "call_tool"]
# A decision in each protocol that calls add(a=1, b=2), complete.
ADD_CALLS = {
    "tool_calling": tool_call("add", {"a": 1, "b": 2}),
    "json": json_action("add", {"a": 1, "b": 2}),
    "react": 'Thought: add them\nAction: add[{"a": 1, "b": 2}]',
    "call_tool": 'CALL_TOOL(add, {"a": 1, "b": 2})',
}
ANSWERS = {
    "tool_calling": "3",
    "json": json_action("final_answer", "3"),
    "react": "Final Answer: 3",
    "call_tool": "FINAL: 3",
}


class Recorder:
    """A calculator and an adder that record every run: a cut reply's call must never run."""

    def __init__(self) -> None:
        self.runs: list[str] = []

        @tool
        def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            self.runs.append(expression)
            return "437"

        @tool("add")
        def adder(a: int, b: int) -> int:
            """Add two integers."""
            self.runs.append(f"{a} + {b}")
            return a + b

        self.calculator, self.add = calculator, adder


@pytest.fixture
def runaway():
    with RunawayOpenAIServer() as server:
        yield server


@pytest.fixture
def recorder():
    return Recorder()


# the cap on the models reinloop sets up --------------------------------------------------------------


@pytest.fixture
def init_calls(monkeypatch):
    """What `init_chat_model` is called with; it returns a scripted model."""
    import langchain.chat_models

    calls: list[tuple[str, dict]] = []

    def init_chat_model(model, **kwargs):
        calls.append((model, kwargs))
        return ScriptedChatModel(replies=["done"])

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", init_chat_model)
    return calls


@pytest.mark.parametrize(
    "model, given, expected",
    [
        ("openai:gpt-4o-mini", {}, {"max_tokens": DEFAULT_REPLY_TOKENS}),
        ("anthropic:claude-sonnet-4-5", {"max_reply_tokens": 300}, {"max_tokens": 300}),
        ("ollama:llama3.2", {"max_reply_tokens": 300}, {"num_predict": 300}),  # ChatOllama ignores max_tokens
        (
            "llama3.2",
            {"max_reply_tokens": 300, "model_provider": "ollama"},
            {"num_predict": 300, "model_provider": "ollama"},
        ),
        ("openai:gpt-4o-mini", {"max_reply_tokens": 300, "max_tokens": 50}, {"max_tokens": 50}),  # the caller's wins
        ("openai:gpt-4o-mini", {"max_reply_tokens": None}, {}),
    ],
    ids=["default", "anthropic", "ollama", "ollama-provider-keyword", "explicit-keyword-wins", "no-cap"],
)
def test_a_model_string_is_set_up_with_the_cap_in_its_providers_keyword(init_calls, model, given, expected):
    resolve_model(model, **given)
    assert init_calls == [(model, expected)]


def test_build_agent_caps_a_model_string_and_a_summarizer_string_but_leaves_a_model_object_as_built(init_calls):
    build_agent("openai:gpt-4o-mini", [add], config=AgentConfig(max_reply_tokens=256), summary_model="openai:gpt-4.1")
    assert init_calls == [("openai:gpt-4o-mini", {"max_tokens": 256}), ("openai:gpt-4.1", {"max_tokens": 256})]
    built = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")
    assert resolve_model(built, max_reply_tokens=256) is built and built.max_tokens is None


def openai_completion(text: str) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def test_openai_gets_the_cap_as_max_completion_tokens_alone(monkeypatch):
    """OpenAI's own API reads max_completion_tokens (langchain-openai's name for `max_tokens`) and refuses
    max_tokens beside it: only the first is sent there. No network: the request stops at a mock transport."""
    sent: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=openai_completion("4"))

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    model = resolve_model(
        "openai:gpt-4o-mini", api_key="sk-test", http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )
    assert model.invoke("2 + 2?").text == "4"
    assert sent[0]["max_completion_tokens"] == DEFAULT_REPLY_TOKENS and "max_tokens" not in sent[0]


def test_the_embedded_model_is_capped_for_llama_cpp_too(tmp_path):
    from reinloop.models.local import REPLY_TOKENS, LocalModelServer

    server = LocalModelServer(tmp_path / "model.gguf")  # not started: only its chat model is built
    try:
        chat = server.chat_model()
    finally:
        server.__exit__(None, None, None)
    assert isinstance(chat, ChatOpenAI)
    assert (chat.max_tokens, chat.extra_body) == (REPLY_TOKENS, {"max_tokens": REPLY_TOKENS})


# a cut reply is never acted on ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_run_whose_every_reply_is_cut_runs_no_call_and_ends_at_max_iterations(protocol, recorder):
    model = ScriptedChatModel(respond=lambda messages: cut_reply(ADD_CALLS[protocol]), max_calls=20)
    # No re-plans: were a cut reply counted as an error, error_streak would stop the run at the third round.
    config = AgentConfig(protocol=protocol, max_replans=0, max_iterations=4)
    agent = build_agent(model, [recorder.add], config=config, checkpointer=InMemorySaver())
    result = agent.invoke({"task": "Add 1 and 2."}, new_thread())
    assert recorder.runs == [] and not [m for m in result["messages"] if isinstance(m, ToolMessage)]
    # A cut reply is the model's own mistake: retried with the hint, never an error of the streak; each round,
    # the cut reply and its retry (cut again), until max_iterations ends the run.
    calls_a_round = 1 + config.max_parse_retries
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("max_iterations", 4, 4 * calls_a_round)
    assert result["consecutive_errors"] == 0
    for call in model.calls[1:]:  # every call after the first is shown why the reply before it was not used
        hint = call.messages[-1]
        assert isinstance(hint, HumanMessage) and "cut off by the output limit" in hint.content
        assert "write a shorter reply" in hint.content


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_cut_reply_is_retried_like_an_unreadable_one_and_the_shorter_reply_runs(protocol, recorder):
    replies = [cut_reply(ADD_CALLS[protocol]), ADD_CALLS[protocol], ANSWERS[protocol]]
    model = ScriptedChatModel(replies=replies)
    agent = build_agent(model, [recorder.add], config=AgentConfig(protocol=protocol), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "Add 1 and 2."}, new_thread())
    assert recorder.runs == ["1 + 2"]  # once: the retry's call, not the cut one
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("answered", "3", 2)
    assert result["consecutive_errors"] == 0  # a retry that succeeds is no error, as for an unreadable reply


# every reply's tokens count ------------------------------------------------------------------------------

COUNTER = TokenCounter()
LONG = "word " * 400
# A reply cut in the middle of a call's arguments: it holds nothing else.
CUT_CALL = AIMessage("", invalid_tool_calls=[{"name": "add", "args": '{"a": ' + "1" * 2000, "id": "c", "error": None}])


@pytest.mark.parametrize(
    "reply, expected, source",
    [
        (
            AIMessage(LONG, usage_metadata={"input_tokens": 90, "output_tokens": 450, "total_tokens": 540}),
            450,
            "provider",
        ),
        (
            AIMessage(LONG, usage_metadata={"input_tokens": 90, "output_tokens": 0, "total_tokens": 90}),
            "counted",
            "provider",
        ),
        (AIMessage(LONG), "counted", "tiktoken"),
        (CUT_CALL, "counted", "tiktoken"),
        (AIMessage("", usage_metadata={"input_tokens": 90, "output_tokens": 0, "total_tokens": 90}), 0, "provider"),
    ],
    ids=["reported", "reported-as-none", "unreported", "unreported-cut-call", "empty"],
)
def test_a_reply_costs_its_reported_completion_tokens_or_else_what_it_holds(reply, expected, source):
    usage = call_usage("decide", reply, 100, COUNTER)
    assert usage["source"] == source
    if expected == "counted":
        assert usage["completion_tokens"] >= 400  # what it holds, not the nothing reported
    else:
        assert usage["completion_tokens"] == expected


def test_a_model_that_reports_no_tokens_still_ends_at_the_run_token_budget():
    model = ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": 1, "b": 2}, content=LONG), max_calls=10)
    agent = build_agent(model, [add], config=AgentConfig(run_token_budget=1_500), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "Add 1 and 2 again and again."}, new_thread())
    assert result["finish_reason"] == "token_budget" and result["usage"]["completion_tokens"] >= 400


# against a server that never stops generating -----------------------------------------------------------


@pytest.mark.parametrize("protocol", ["json", "react", "call_tool"])
def test_the_runaway_server_writes_a_decision_each_text_protocol_would_run_were_it_not_cut(protocol):
    registry = ToolRegistry([Recorder().calculator])
    decision, _ = REGISTERED[protocol]().parse(AIMessage(RUNAWAY_DECISION + " on on"), registry)
    assert decision["calls"][0]["args"] == {"expression": "23 * 19"}


def run_cli(runaway, tmp_path, *options):
    db = tmp_path / "runs.sqlite"
    code = main(["run", "What is 23 * 19?", "--base-url", runaway.base_url, "--thread", "t", "--db", str(db),
                 "--no-memory", "--workspace", str(tmp_path / "ws"), "--quiet", *options])  # fmt: skip
    saver = sqlite_checkpointer(db)
    try:
        return code, agent_topology(saver).get_state({"configurable": {"thread_id": "t"}}).values
    finally:
        saver.conn.close()


def assert_capped(runaway, cap):
    """Every request carried the cap both ways, and no reply went past it."""
    assert runaway.requests and all(
        (body.get("max_tokens"), body.get("max_completion_tokens")) == (cap, cap) for body in runaway.requests
    )
    assert len(runaway.completions) == len(runaway.requests) and max(runaway.completions) <= cap


def assert_nothing_ran(values):
    assert not [m for m in values["messages"] if isinstance(m, ToolMessage)]
    assert values["usage"]["model_calls"] <= values["iteration"] * 2  # each round: a reply and one retry


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_command_caps_a_server_that_never_stops_and_ends_the_run_at_max_iterations(runaway, tmp_path, protocol):
    code, values = run_cli(runaway, tmp_path, "--protocol", protocol, "--max-replans", "0", "--max-iterations", "3")
    # Cut replies are the model's own mistakes, not errors of the streak: only max_iterations ends the run.
    assert (code, values["finish_reason"]) == (EXIT_CODES["max_iterations"], "max_iterations") == (3, "max_iterations")
    assert (values["iteration"], values["consecutive_errors"]) == (3, 0)
    assert values["usage"]["model_calls"] == len(runaway.requests) == 3 * 2  # each round: a reply and one retry
    assert_capped(runaway, DEFAULT_REPLY_TOKENS)
    assert_nothing_ran(values)  # every reply held a complete calculator call, cut off
    assert values["usage"]["completion_tokens"] == sum(runaway.completions)  # as the server reported them


def test_the_command_ends_a_runaway_within_its_run_token_budget(runaway, tmp_path):
    code, values = run_cli(runaway, tmp_path, "--protocol", "json", "--run-token-budget", "2000")
    assert (code, values["finish_reason"]) == (EXIT_CODES["token_budget"], "token_budget")
    assert_capped(runaway, DEFAULT_REPLY_TOKENS)
    # The budget is checked after each round: it is passed by one round at most, a reply and its retry, each
    # capped, sent a prompt within the context budget: at most the toolset's fixed part plus the memory's share.
    toolset = default_toolset(tmp_path / "tools", model=ScriptedChatModel())
    budget = build_agent(ScriptedChatModel(), toolset, config=AgentConfig(protocol="json")).context_token_budget
    round_most = 2 * (DEFAULT_REPLY_TOKENS + budget)
    assert values["iteration"] == 1 and values["usage"]["total_tokens"] < 2000 + round_most


def test_build_agent_caps_a_model_string_pointed_at_a_server_by_openai_base_url(runaway, recorder, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", runaway.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = AgentConfig(max_reply_tokens=64, max_replans=0, max_iterations=2)
    agent = build_agent("openai:runaway", [recorder.calculator], config=config, checkpointer=InMemorySaver())
    result = agent.invoke({"task": "What is 23 * 19?"}, new_thread())
    assert (result["finish_reason"], result["iteration"], result["consecutive_errors"]) == ("max_iterations", 2, 0)
    assert recorder.runs == [] and len(runaway.requests) == 2 * 2  # each round: a reply and one retry, both cut
    assert_capped(runaway, 64)
    assert "cut off by the output limit at 64 tokens" in json.dumps(runaway.requests[1]["messages"])


@pytest.mark.parametrize("protocol", ["tool_calling", "react"])
def test_a_chatopenai_capped_as_the_readme_says_holds_against_a_server_that_never_stops(runaway, recorder, protocol):
    cap = 128
    model = ChatOpenAI(model="runaway", base_url=runaway.base_url, api_key="sk-test", max_tokens=cap,
                       extra_body={"max_tokens": cap})  # fmt: skip
    config = AgentConfig(protocol=protocol, max_iterations=3)
    agent = build_agent(model, [recorder.calculator], config=config, checkpointer=InMemorySaver())
    result = agent.invoke({"task": "What is 23 * 19?"}, new_thread())
    assert result["finish_reason"] == "max_iterations" and recorder.runs == []
    assert_capped(runaway, cap)
    assert_nothing_ran(result)


def test_openai_compatible_model_is_that_chatopenai(runaway):
    model = openai_compatible_model(runaway.base_url, "runaway", max_reply_tokens=32, api_key="sk-test")
    reply = model.invoke("Go on.")
    assert_capped(runaway, 32)
    assert reply.response_metadata["finish_reason"] == "length" and reply.usage_metadata["output_tokens"] == 32


def test_a_model_built_without_a_cap_is_sent_as_built_and_its_runaway_reply_still_never_runs(runaway, recorder):
    model = ChatOpenAI(model="runaway", base_url=runaway.base_url, api_key="sk-test")
    config = AgentConfig(protocol="call_tool", max_iterations=2)
    agent = build_agent(model, [recorder.calculator], config=config, checkpointer=InMemorySaver())
    result = agent.invoke({"task": "What is 23 * 19?"}, new_thread())
    assert not any("max_tokens" in body or "max_completion_tokens" in body for body in runaway.requests)
    assert min(runaway.completions) > 60_000  # RunawayOpenAIServer.UNCAPPED_CHARS, bounded for this test
    assert result["finish_reason"] == "max_iterations" and recorder.runs == []
    assert RUNAWAY_DECISION.split("\n")[3] in runaway.requests[1]["messages"][-1]["content"]  # quoted, not run
