"""The tool-attempts budget (`reinloop.guards.tool_attempts`): max_tool_attempts ends a run with its own reason,
retries get only what is left, and validate_args allots attempts within it."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import resume
from reinloop.nodes import validate_args
from reinloop.state import act
from reinloop.testing import parallel_calls, tool_call
from reinloop.tools import ToolRegistry
from tests.conftest import NO_CIRCUIT, make_context, new_thread
from tests.tools.test_retry import Flaky, agent_with, tool_messages, waits  # noqa: F401 - waits: the backoff recorded, no sleeps


def test_max_tool_attempts_ends_a_run_with_its_own_reason_and_gives_retries_only_what_is_left():
    flaky = Flaky(failures=100)
    replies = [tool_call("fetch", {"query": "a"}), tool_call("fetch", {"query": "b"}), "never sent"]
    agent, model = agent_with([flaky.tool], replies, max_tool_attempts=5, error_threshold=10, guards=NO_CIRCUIT)
    result = agent.invoke({"task": "t"})
    assert result["finish_reason"] == "max_tool_attempts"
    assert flaky.calls == 5  # 3 in the first round, then the 2 that were left
    assert result["tool_attempts"] == 5 and len(model.calls) == 2
    assert result["messages"][-1].content.startswith(
        "Stopped: the run made 5 tool calls, retries included, in 2 rounds (the limit is 5)."
    )


def test_a_call_beyond_the_budget_is_refused_unrun():
    flaky = Flaky(failures=0)
    calls = parallel_calls([("fetch", {"query": q}) for q in "abc"])
    agent, _ = agent_with([flaky.tool], [calls, "never sent"], max_tool_attempts=2)
    result = agent.invoke({"task": "t"})
    assert result["finish_reason"] == "max_tool_attempts"
    assert flaky.calls == 2
    assert [message.content for message in tool_messages(result)] == [
        "page for a",
        "page for b",
        "Error: not run. This run has made all the 2 tool calls it may make. Give your final answer with what "
        "you already know.",
    ]


def test_by_default_the_budget_is_tool_attempts_per_round_of_the_iteration_budget():
    flaky = Flaky(failures=100)
    replies = [tool_call("fetch", {"query": str(n)}) for n in range(3)] + ["never sent"]
    agent, _ = agent_with(
        [flaky.tool], replies, max_iterations=3, tool_attempts=2, error_threshold=10, guards=NO_CIRCUIT
    )
    result = agent.invoke({"task": "t"})
    # 3 rounds of 2 attempts: the budget and the rounds run out together, and the rounds are what ended it.
    assert (result["finish_reason"], flaky.calls) == ("max_iterations", 6)


def test_a_resume_after_the_budget_broke_gets_a_fresh_one():
    flaky = Flaky(failures=0)
    replies = [tool_call("fetch", {"query": "a"}), tool_call("fetch", {"query": "b"}), "done"]
    agent, _ = agent_with([flaky.tool], replies, InMemorySaver(), max_tool_attempts=1)
    thread = new_thread()
    assert agent.invoke({"task": "t"}, thread)["finish_reason"] == "max_tool_attempts"
    result = resume(agent, thread)
    assert (result["finish_reason"], result["tool_attempts"], flaky.calls) == ("max_tool_attempts", 1, 2)


def ready(call_id: str, name: str = "fetch") -> dict[str, Any]:
    return {"name": name, "args": {"query": call_id}, "id": call_id, "type": "tool_call"}


@pytest.mark.parametrize(
    ("used", "calls", "expected"),
    [
        (0, 1, [3]),
        (0, 3, [3, 3, 3]),
        (5, 3, [3, 1, 1]),  # 5 left: first attempts first, then retries in order
        (7, 3, [1, 1, 1]),
        (8, 3, [1, 1, 0]),  # 2 left: the third call is refused
        (10, 1, [0]),
    ],
    ids=["one", "plenty", "retries-short", "no-retries", "refused", "none-left"],
)
def test_validate_args_allots_attempts_within_the_budget(used, calls, expected):
    ctx = make_context(tools=[Flaky(0).tool], max_tool_attempts=10)
    state = {"decision": act([ready(f"c{n}") for n in range(calls)]), "tool_attempts": used}
    checks = validate_args(state, ctx, {})["checks"]
    assert [check["attempts"] for check in checks] == expected
    assert [check["error_kind"] for check in checks] == [None if n else "over_budget" for n in expected]


def test_validate_args_gives_a_non_retryable_tool_one_attempt_and_its_spare_to_others():
    registry = ToolRegistry()
    registry.add(Flaky(0, name="once").tool, retryable=False)
    registry.add(Flaky(0).tool)
    ctx = make_context(tools=registry, max_tool_attempts=5)
    state = {"decision": act([ready("c1", "once"), ready("c2"), ready("c3")]), "tool_attempts": 0}
    assert [check["attempts"] for check in validate_args(state, ctx, {})["checks"]] == [1, 3, 1]
