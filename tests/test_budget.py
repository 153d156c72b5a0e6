"""The context budget: by default the tools' fixed part plus the memory's share, within the model's input window;
large toolsets run, a window too small for them is refused with the numbers, a given budget holds."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from reinloop import AgentConfig, ConfigurationError, build_agent
from reinloop.budget import MEMORY_TOKENS, MIN_MEMORY_TOKENS, ContextBudget, input_window
from reinloop.models.local import INPUT_TOKENS, LocalModelServer, local_protocol
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import THREAD
from tests.memory.test_memory import tokens_sent

RESOURCES = ("issue", "pull_request", "branch", "commit", "release", "workflow_run", "file", "repository", "label",
             "milestone")  # fmt: skip
ACTIONS = ("list", "get", "create", "update", "delete", "search", "archive", "export", "comment_on", "watch")
PARAMS: dict[str, dict[str, Any]] = {
    "owner": {"type": "string", "description": "Repository owner: the user or organization that owns it."},
    "repo": {"type": "string", "description": "Repository name, without the owner."},
    "number": {"type": "integer", "description": "The number that identifies the item in the repository."},
    "query": {"type": "string", "description": "Search query, in GitHub's search syntax (qualifiers allowed)."},
    "state": {"type": "string", "enum": ["open", "closed", "all"], "description": "Filter by state."},
    "labels": {"type": "array", "items": {"type": "string"}, "description": "Label names to filter by or set."},
    "since": {"type": "string", "format": "date-time", "description": "Only results after this ISO 8601 time."},
    "page": {"type": "integer", "minimum": 1, "description": "Page number of the results, from 1."},
    "perPage": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Results per page (max 100)."},
    "body": {"type": "string", "description": "Body text, in GitHub-flavored Markdown."},
    "files": {
        "type": "array",
        "description": "The files to push, each with its path and content.",
        "items": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
ACTION_PARAMS = {
    "list": ("owner", "repo", "state", "labels", "since", "page", "perPage"),
    "get": ("owner", "repo", "number"),
    "create": ("owner", "repo", "body", "labels", "files"),
    "update": ("owner", "repo", "number", "body", "state", "labels"),
    "delete": ("owner", "repo", "number"),
    "search": ("query", "state", "since", "page", "perPage"),
    "archive": ("owner", "repo", "number", "body"),
    "export": ("owner", "repo", "since", "page", "perPage"),
    "comment_on": ("owner", "repo", "number", "body"),
    "watch": ("owner", "repo", "number", "state"),
}


def github_tools(count: int) -> list[StructuredTool]:
    """`count` (up to 100) tools of an MCP-like GitHub server, each described by a JSON schema (about 150 to 210
    tokens a tool: 40 take about 6,800 tokens, 100 about 15,000)."""
    tools = []
    for action, resource in itertools.islice(itertools.product(ACTIONS, RESOURCES), count):
        params = ACTION_PARAMS[action]
        schema = {
            "type": "object",
            "properties": {name: PARAMS[name] for name in params},
            "required": [name for name in params if name in ("owner", "repo", "number", "query")],
        }
        name = f"{action}_{resource}"
        what = f"{action.replace('_', ' ').capitalize()} the {resource.replace('_', ' ')} items of a repository."
        description = f"{what} Returns their number, title, state, author and dates, with the fields asked for."
        tools.append(StructuredTool(name=name, description=description, args_schema=schema, func=_result(name)))
    return tools


def _result(name: str) -> Any:
    def run(**args: Any) -> str:
        items = (f"item-{n} open by mara, updated 2024-05-{n % 28 + 1:02d}" for n in range(30))
        return f"{name} {args}: " + " ".join(items)

    return run


def long_run(rounds: int, **model: Any) -> ScriptedChatModel:
    """Calls get_issue with a new number each round, then answers; `model`: more ScriptedChatModel fields."""
    numbers = itertools.count()

    def respond(messages: list[BaseMessage]) -> AIMessage | str:
        number = next(numbers)
        if number == rounds:
            return "done"
        return tool_call("get_issue", {"owner": "acme", "repo": "billing", "number": number}, content="next " * 40)

    return ScriptedChatModel(respond=respond, max_calls=rounds + 1, **model)


@pytest.mark.parametrize("count", [40, 100])
def test_forty_and_a_hundred_tools_run_under_the_default_budget_and_every_prompt_stays_within_it(count: int):
    model = long_run(rounds=18)
    summarizer = ScriptedChatModel(respond=lambda messages: "earlier issues read")
    agent = build_agent(model, github_tools(count), config=AgentConfig(max_iterations=20), summary_model=summarizer)
    budget = agent.context_token_budget
    result = agent.invoke({"task": "Read the issues one by one, then answer."}, THREAD)
    assert result["finish_reason"] == "answered" and result.get("summaries")  # the window was folded on the way
    largest = max(tokens_sent(call.messages, call.tools) for call in model.calls)
    assert largest <= budget
    fixed = tokens_sent([], model.calls[0].tools)  # the tool schemas alone: no system prompt under native calls
    assert budget - MEMORY_TOKENS >= fixed > 5_000 * count // 40


@pytest.mark.parametrize("count", [5, 40])
def test_the_default_budget_is_the_tool_schemas_plus_the_memory_share(count: int):
    model = ScriptedChatModel(replies=["done"])
    agent = build_agent(model, github_tools(count))
    agent.invoke({"task": "t"})
    schemas = tokens_sent([], model.calls[0].tools)  # no system prompt under native tool calls
    assert 0 < agent.context_token_budget - MEMORY_TOKENS - schemas < 10  # and the framing of an empty task


def test_an_openai_models_profile_gives_its_window_and_forty_tools_fit_in_it():
    model = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")  # the profile ships with langchain-openai: offline
    assert input_window(model) == 128_000
    unlimited = build_agent(ScriptedChatModel(), github_tools(40))  # no profile: no window
    assert 10_000 < build_agent(model, github_tools(40)).context_token_budget == unlimited.context_token_budget


def test_the_models_input_window_caps_the_default_budget():
    model = long_run(rounds=14, profile={"max_input_tokens": 9_000})
    agent = build_agent(model, github_tools(40), summary_model=ScriptedChatModel(respond=lambda messages: "s"))
    assert agent.context_token_budget == 9_000
    assert agent.invoke({"task": "Read the issues."}, THREAD)["finish_reason"] == "answered"
    assert max(tokens_sent(call.messages, call.tools) for call in model.calls) <= 9_000


def test_a_window_that_cannot_hold_the_tools_and_a_minimal_memory_is_refused_with_the_numbers():
    small = ScriptedChatModel(profile={"max_input_tokens": 7_000})
    pattern = (
        r"take [\d,]+ tokens of the model's input window \(7,000 tokens, its profile's max_input_tokens\), "
        r"leaving [\d,]+ for the task and memory, which need at least 2,000 .*: pass fewer tools"
    )
    with pytest.raises(ConfigurationError, match=pattern):
        build_agent(small, github_tools(40))


def test_a_given_budget_is_taken_as_it_is_and_refused_with_the_numbers_when_the_tools_leave_too_little():
    model = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")
    given = AgentConfig(context_token_budget=9_000)
    assert build_agent(model, github_tools(40), config=given).context_token_budget == 9_000
    with pytest.raises(ConfigurationError) as refused:
        build_agent(model, github_tools(40), config=AgentConfig(context_token_budget=8_000))
    fixed = int(re.search(r"take ([\d,]+) tokens", str(refused.value))[1].replace(",", ""))  # type: ignore[index]
    assert f"context_token_budget=8000, leaving {8_000 - fixed:,} for the task and memory" in str(refused.value)
    assert f"raise context_token_budget to at least {fixed + MIN_MEMORY_TOKENS}" in str(refused.value)
    assert "the model's profile takes up to 128,000 input tokens" in str(refused.value)


def test_the_embedded_models_context_gives_its_budget_without_loading_it():
    chat = LocalModelServer(Path("not-loaded.gguf")).chat_model()  # the server is never started
    assert input_window(chat) == INPUT_TOKENS
    config = AgentConfig(protocol="json")
    agent = build_agent(chat, github_tools(5), config=config, protocol=local_protocol(None))
    assert agent.context_token_budget == INPUT_TOKENS == 3_400
    with pytest.raises(ConfigurationError, match=r"more than the model's input window \(3,400 tokens"):
        build_agent(chat, github_tools(40), config=config, protocol=local_protocol(None))


@pytest.mark.parametrize(
    ("given", "fixed", "window", "tokens", "refused"),
    [
        (None, 800, None, 6_800, False),
        (None, 6_000, None, 12_000, False),
        (None, 6_000, 128_000, 12_000, False),
        (None, 6_000, 8_000, 8_000, False),  # 2,000 left: the least
        (None, 6_000, 7_999, 7_999, True),
        (None, 800, 1_600, 1_600, False),  # as much as the fixed part
        (None, 800, 1_599, 1_599, True),
        (500, 200, 100_000, 500, False),  # given: taken as it is
        (6_000, 6_000, None, 6_000, True),
    ],
    ids=[
        "no-window",
        "large-toolset",
        "large-window",
        "window-caps",
        "window-too-small",
        "small-fixed-part",
        "small-fixed-part-too-small",
        "given",
        "given-too-small",
    ],
)
def test_the_budget_is_resolved_and_checked(given, fixed, window, tokens, refused):
    budget = ContextBudget.of(given, fixed, window)
    assert (budget.tokens, budget.problem() is not None) == (tokens, refused)


def test_the_worst_case_counts_tokens_at_the_agents_budget_or_per_budget():
    config = AgentConfig()
    agent = build_agent(ScriptedChatModel(), github_tools(40), config=config)
    bound = config.worst_case(agent.context_token_budget)["same_call"]
    assert bound.tokens == bound.model_calls * (agent.context_token_budget + config.max_reply_tokens)
    assert config.worst_case()["same_call"].tokens is None
    assert f"| {bound.model_calls} * (budget + 1,024) |" in config.worst_case().table()
    assert AgentConfig(context_token_budget=9_000).worst_case()["same_call"].tokens == bound.model_calls * 10_024
