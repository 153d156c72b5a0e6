"""Provider prompt caching: Anthropic breakpoints where the prompt's marks are (with AnthropicPromptCachingMiddleware
too, never more than four), OpenAI's per-thread prompt_cache_key, and cached tokens counted in the run's usage,
the CLI's summary, the inspector and the evaluation."""

from __future__ import annotations

import io
import json
from typing import Any
from unittest import mock

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_anthropic import ChatAnthropic
from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from starlette.testclient import TestClient

from reinloop import build_agent
from reinloop.cli import main
from reinloop.guards.token_budget import TokenBudget
from reinloop.inspect import inspect_app
from reinloop.inspect.timeline import timeline
from reinloop.memory.usage import cache_tokens
from reinloop.models.caching import MAX_BREAKPOINTS, bound_settings, cache_key, for_provider
from reinloop.nodes import decide
from reinloop.prompt import CACHE_POINT_KEY, VOLATILE_KEY
from reinloop.testing import ScriptedChatModel, tool_call
from tests.anthropic_server import ScriptedAnthropicServer
from tests.conftest import THREAD, add, lookup, make_context
from tests.openai_server import ScriptedOpenAIServer

CACHED = {"type": "ephemeral"}


def anthropic(base_url: str = "http://127.0.0.1:9") -> ChatAnthropic:
    return ChatAnthropic(model="claude-sonnet-4-5", api_key="test", base_url=base_url, max_retries=0)


def point(text: str) -> HumanMessage:
    return HumanMessage(text, additional_kwargs={CACHE_POINT_KEY: True})


def volatile(text: str) -> HumanMessage:
    return HumanMessage(text, additional_kwargs={VOLATILE_KEY: True})


def round_trip(number: int) -> list[BaseMessage]:
    call_id = f"toolu_{number:04d}"
    calls = [{"name": "add", "args": {"a": number, "b": 1}, "id": call_id, "type": "tool_call"}]
    return [AIMessage(f"step {number}", tool_calls=calls), ToolMessage(f"result {number}", tool_call_id=call_id)]


# The prompt's layout: system, task, memory note, the history, then the volatile tail.
PROMPT = [
    SystemMessage("You are careful."),
    point("the task"),
    point("Earlier steps: the note"),
    *round_trip(1),
    *round_trip(2),
    volatile("a reflection"),
    volatile("a correction hint"),
]


def payload(model: ChatAnthropic, messages: list[BaseMessage], **settings: Any) -> dict[str, Any]:
    """What `model` would send for `messages` with reinloop's breakpoints, as langchain-anthropic builds it."""
    sent, kwargs = for_provider(model, messages, "key", settings)
    assert kwargs == {}
    built: dict[str, Any] = model._get_request_payload(sent, **settings)
    return built


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where `body` has a breakpoint: "top-level", "system", "tool <name>", or a message block's text (a tool
    result's content), in the order sent."""
    found = ["top-level"] if "cache_control" in body else []
    found += [f"tool {tool['name']}" for tool in body.get("tools") or [] if "cache_control" in tool]
    system = body.get("system")
    if isinstance(system, list):
        found += ["system" for block in system if "cache_control" in block]
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if "cache_control" in block:
                found.append(_text(block))
    return found


def _text(block: dict[str, Any]) -> str:
    if block["type"] == "tool_result":
        content = block["content"]
        return content if isinstance(content, str) else " ".join(part["text"] for part in content)
    return str(block.get("text", block["type"]))


# Anthropic: breakpoints from the marks -----------------------------------------------------------------------


def test_breakpoints_go_on_the_marked_prefix_and_the_end_of_the_history_never_on_the_volatile_tail():
    body = payload(anthropic(), PROMPT)
    assert breakpoints(body) == ["the task", "Earlier steps: the note", "result 2"]
    assert all(block["cache_control"] == CACHED for block in _blocks(body) if "cache_control" in block)
    assert body["system"] == "You are careful."  # sent as it was: the task's breakpoint covers it


def test_a_first_decision_gets_one_breakpoint_on_the_task():
    assert breakpoints(payload(anthropic(), [SystemMessage("s"), point("the task")])) == ["the task"]


def test_the_prompt_state_keeps_is_never_changed_by_the_breakpoints():
    before = [message.model_copy(deep=True) for message in PROMPT]
    payload(anthropic(), PROMPT)
    assert before == PROMPT


def tagged_system(text: str) -> SystemMessage:
    return SystemMessage([{"type": "text", "text": text, "cache_control": CACHED}])


MANY_POINTS = [point(f"part {n}") for n in range(5)]
TAGGED_TOOL = {"name": "add", "description": "Add.", "input_schema": {"type": "object"}, "cache_control": CACHED}


@pytest.mark.parametrize(
    ("messages", "settings", "expected"),
    [
        # AnthropicPromptCachingMiddleware's three (system, last tool, top-level): the last block is its own,
        # the latest stable prefix takes the fourth.
        (
            [tagged_system("s"), *PROMPT[1:]],
            {"cache_control": CACHED, "tools": [TAGGED_TOOL]},
            ["top-level", "tool add", "system", "Earlier steps: the note"],
        ),
        # Four of the user's own already: nothing added.
        ([tagged_system("a"), tagged_system("b"), tagged_system("c"), tagged_system("d"), *PROMPT[1:]], {}, None),
        # More marks than room: the end of the history, then the latest marks.
        ([*MANY_POINTS, HumanMessage("the last step")], {}, ["part 2", "part 3", "part 4", "the last step"]),
        # A top-level cache_control set on the model (model_kwargs) counts as the middleware's does.
        (PROMPT, {"cache_control": CACHED}, ["top-level", "the task", "Earlier steps: the note"]),
    ],
    ids=["caching-middleware", "four-of-the-users", "more-marks-than-room", "top-level-setting"],
)
def test_breakpoints_never_exceed_four_with_those_already_there(messages, settings, expected):
    body = payload(anthropic(), messages, **settings)
    found = breakpoints(body)
    assert len(found) <= MAX_BREAKPOINTS
    if expected is not None:
        assert found == expected
    else:
        assert len(found) == MAX_BREAKPOINTS and all(place == "system" for place in found)


def test_an_empty_tool_result_passes_the_end_of_history_breakpoint_back():
    messages = [point("the task"), *round_trip(1)[:1], ToolMessage("", tool_call_id="toolu_0001")]
    # The call's thought is the last text before the empty result: the breakpoint ends the prefix there.
    assert breakpoints(payload(anthropic(), messages)) == ["the task", "step 1"]


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block for message in body["messages"] if isinstance(message["content"], list) for block in message["content"]
    ]


# Other models, and the user's own settings ---------------------------------------------------------------------


def test_other_models_are_sent_the_prompt_as_it_is():
    model = ScriptedChatModel()
    sent, kwargs = for_provider(model, PROMPT, "key", {})
    assert sent == PROMPT and kwargs == {}


@pytest.mark.parametrize(
    ("model_kwargs", "settings"),
    [({"prompt_cache_key": "mine"}, {}), ({}, {"prompt_cache_key": "mine"})],
    ids=["model-kwargs", "bound"],
)
def test_a_prompt_cache_key_the_user_set_is_kept(model_kwargs, settings):
    model = ChatOpenAI(model="gpt-4o-mini", api_key="test", model_kwargs=model_kwargs)
    assert for_provider(model, PROMPT, "reinloop-key", settings)[1] == {}


def test_the_cache_key_is_one_per_thread_and_does_not_show_the_thread_id():
    first = cache_key({"configurable": {"thread_id": "alice@example.com"}})
    assert first == cache_key({"configurable": {"thread_id": "alice@example.com"}})
    assert first != cache_key({"configurable": {"thread_id": "bob"}})
    assert first is not None and "alice" not in first and len(first) <= 64
    assert cache_key({}) is None and cache_key(None) is None


def test_bound_settings_are_what_a_binding_sends():
    bound = anthropic().bind_tools([add])
    assert [tool["name"] for tool in bound_settings(bound)["tools"]] == ["add"]
    assert bound_settings(anthropic()) == {}


# Anthropic end to end: a real ChatAnthropic over HTTP -------------------------------------------------------------


class PassThrough(AgentMiddleware):
    """A middleware with a model hook, so that decide's model call goes through the middleware path."""

    def wrap_model_call(self, request, handler):
        return handler(request)

    async def awrap_model_call(self, request, handler):
        return await handler(request)


ANTHROPIC_USAGE = {"input_tokens": 50, "output_tokens": 10, "cache_read_input_tokens": 900,
                   "cache_creation_input_tokens": 40}  # fmt: skip
ANTHROPIC_SCRIPT = [{"tool": "add", "args": {"a": 1, "b": 2}}, {"tool": "add", "args": {"a": 3, "b": 4}}, "It is 7."]


async def run(agent: Any, how: str, task: str, config: dict[str, Any]) -> dict[str, Any]:
    if how == "ainvoke":
        result: dict[str, Any] = await agent.ainvoke({"task": task}, config)
    else:
        result = agent.invoke({"task": task}, config)
    return result


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
@pytest.mark.parametrize("middleware", [(), (PassThrough(),)], ids=["plain", "through-middleware"])
async def test_an_anthropic_agent_sends_breakpoints_on_the_task_and_the_latest_result(how, middleware):
    with ScriptedAnthropicServer() as server:
        server.replies, server.usage = list(ANTHROPIC_SCRIPT), ANTHROPIC_USAGE
        agent = build_agent(anthropic(server.base_url), [add, lookup], middleware=middleware)
        result = await run(agent, how, "Add 1 and 2, then 3 and 4.", {"configurable": {"thread_id": "a"}})
    assert result["finish_reason"] == "answered"
    found = [breakpoints(body) for body in server.requests]
    assert found == [["Add 1 and 2, then 3 and 4."], ["Add 1 and 2, then 3 and 4.", "3"],
                     ["Add 1 and 2, then 3 and 4.", "7"]]  # fmt: skip
    # Anthropic's input_tokens leave the cache out; langchain-anthropic adds it back, and so the run's usage.
    assert result["usage"]["prompt_tokens"] == 3 * (50 + 900 + 40)
    assert (result["usage"]["cache_read_tokens"], result["usage"]["cache_write_tokens"]) == (3 * 900, 3 * 40)
    assert result["last_call"]["cache_read_tokens"] == 900


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
async def test_with_anthropics_caching_middleware_the_last_block_is_its_own_and_four_is_never_passed(how):
    with ScriptedAnthropicServer() as server:
        server.replies, server.usage = list(ANTHROPIC_SCRIPT), ANTHROPIC_USAGE
        agent = build_agent(
            anthropic(server.base_url),
            [add, lookup],
            middleware=[AnthropicPromptCachingMiddleware()],
            config=None,
        )
        result = await run(agent, how, "Add 1 and 2, then 3 and 4.", {"configurable": {"thread_id": "m"}})
    assert result["finish_reason"] == "answered"
    for body in server.requests:
        found = breakpoints(body)
        assert len(found) <= MAX_BREAKPOINTS
        # The middleware's own: the top-level one (the last block) and the last tool; reinloop's: the task.
        assert found == ["top-level", "tool lookup", "Add 1 and 2, then 3 and 4."]


# OpenAI end to end: a real ChatOpenAI against the recording server ----------------------------------------------


@pytest.mark.parametrize("middleware", [(), (PassThrough(),)], ids=["plain", "through-middleware"])
def test_openai_requests_carry_one_prompt_cache_key_per_thread(middleware):
    with ScriptedOpenAIServer() as server:
        model = ChatOpenAI(model="scripted", api_key="test", base_url=server.base_url, max_retries=0)
        agent = build_agent(model, [add, lookup], middleware=middleware, checkpointer=InMemorySaver())
        for thread in ("one", "two"):
            server.replies = [{"tool": "add", "args": {"a": 1, "b": 2}}, "It is 3."]
            agent.invoke({"task": "Add 1 and 2."}, {"configurable": {"thread_id": thread}})
    keys = [body.get("prompt_cache_key") for body in server.requests]
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    assert keys[0] == cache_key({"configurable": {"thread_id": "one"}})
    # The prompt's marks stay on this side: a user message's additional_kwargs are not sent.
    assert "reinloop_" not in json.dumps(server.requests)


def test_cached_tokens_of_an_openai_response_join_the_run_usage():
    with ScriptedOpenAIServer() as server:
        server.replies, server.cached_tokens = [{"tool": "add", "args": {"a": 1, "b": 2}}, "It is 3."], 64
        model = ChatOpenAI(model="scripted", api_key="test", base_url=server.base_url, max_retries=0)
        result = build_agent(model, [add]).invoke({"task": "Add 1 and 2."}, {"configurable": {"thread_id": "c"}})
    assert result["usage"]["prompt_tokens"] == 200 and result["usage"]["total_tokens"] == 220
    assert result["usage"]["cache_read_tokens"] == 128 and result["usage"]["cache_write_tokens"] == 0


# Usage: the scripted model ----------------------------------------------------------------------------------------


def reply_with_usage(**details: int) -> AIMessage:
    usage = {"input_tokens": 1_000, "output_tokens": 20, "total_tokens": 1_020, "input_token_details": details}
    return tool_call("add", {"a": 1, "b": 2}).model_copy(update={"usage_metadata": usage})


def test_decide_adds_cache_reads_and_writes_to_usage_saved_before_they_were_kept():
    model = ScriptedChatModel(replies=[reply_with_usage(cache_read=700, cache_creation=200)])
    old_usage = {"model_calls": 2, "prompt_tokens": 500, "completion_tokens": 40, "total_tokens": 540}
    update = decide({"task": "add", "messages": [], "usage": old_usage}, make_context(model=model), THREAD)
    assert update["last_call"]["cache_read_tokens"] == 700 and update["last_call"]["cache_write_tokens"] == 200
    assert update["usage"] == {"model_calls": 3, "prompt_tokens": 1_500, "completion_tokens": 60,
                               "total_tokens": 1_560, "cache_read_tokens": 700, "cache_write_tokens": 200}  # fmt: skip


def test_a_reply_without_a_provider_report_has_no_cached_tokens():
    update = decide({"task": "add", "messages": []}, make_context(model=ScriptedChatModel(replies=["3"])), THREAD)
    assert update["last_call"]["source"] == "tiktoken"
    assert (update["usage"]["cache_read_tokens"], update["usage"]["cache_write_tokens"]) == (0, 0)


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ({"cache_read": 600, "cache_creation": 100}, (600, 100)),
        ({"priority_cache_read": 600, "priority": 400}, (600, 0)),  # langchain-openai's priority tier
        (
            {"cache_read": 0, "cache_creation": 0, "ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 10},
            (0, 40),
        ),  # langchain-anthropic, writes by lifetime
        ({"audio": 5}, (0, 0)),
        ({"cache_read": "many", "cache_creation": True}, (0, 0)),
        ({"cache_read": 5_000, "cache_creation": 5_000}, (1_000, 0)),  # never more than the prompt
    ],
    ids=["openai-anthropic", "service-tier", "by-lifetime", "none", "junk", "over-the-prompt"],
)
def test_cache_tokens_reads_each_providers_report(details, expected):
    assert cache_tokens(reply_with_usage(**details)) == expected


def test_the_token_budget_counts_cached_tokens_whole():
    usage = {"model_calls": 1, "prompt_tokens": 990, "completion_tokens": 10, "total_tokens": 1_000,
             "cache_read_tokens": 990, "cache_write_tokens": 0}  # fmt: skip
    assert TokenBudget(1_000).check({"usage": usage}) is not None
    assert TokenBudget(1_001).check({"usage": usage}) is None


# The CLI's summary and the inspector ----------------------------------------------------------------------------------


def test_the_cli_summary_and_the_inspector_show_cached_tokens(tmp_path, capsys):
    db = str(tmp_path / "runs.sqlite")
    with ScriptedOpenAIServer() as server:
        server.replies, server.cached_tokens = [{"tool": "calculator", "args": {"expression": "1 + 1"}}, "2"], 64
        args = ["run", "What is 1 + 1?", "--thread", "cached", "--base-url", server.base_url, "--no-memory",
                "--workspace", str(tmp_path), "--db", db]  # fmt: skip
        with mock.patch("sys.stdin", io.StringIO("")):
            assert main(args) == 0
    assert "128 read from the provider's cache, 0 written to it" in capsys.readouterr().out
    page = TestClient(inspect_app(db), base_url="http://127.0.0.1").get("/thread/cached")
    assert page.status_code == 200
    assert '<span id="cache-read">128</span> read from the provider' in page.text
    assert "64 from the cache" in page.text


def test_the_timeline_gives_each_round_its_cached_tokens():
    model = ScriptedChatModel(replies=[reply_with_usage(cache_read=700), reply_with_usage(cache_read=800), "3"])
    agent = build_agent(model, [add], checkpointer=InMemorySaver())
    agent.invoke({"task": "add"}, THREAD)
    rounds = timeline(list(agent.get_state_history(THREAD))[::-1]).rounds
    assert [each.cached for each in rounds if each.number] == [700, 800, 0]
