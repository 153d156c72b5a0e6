"""The step_limit breaker: however the graph is invoked, and with whatever recursion limit, a run ends with a
typed finish reason, never with LangGraph's GraphRecursionError, and stays resumable."""

import asyncio
import itertools
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, ConfigurationError, build_agent, resume
from reinloop import graph as graph_module
from reinloop.config import MAX_PARSE_RETRIES, round_steps
from reinloop.resume import prepare_resume
from reinloop.state import AgentState
from reinloop.testing import ScriptedChatModel, json_action, tool_call
from tests.conftest import THREAD, add

ROUNDS = 30  # tool-calling rounds before the model answers, in round ROUNDS + 1


def thirty_rounds_agent(checkpointer=None):
    """An agent whose model calls `add` for ROUNDS rounds (new arguments each time), then answers "done"; it
    fails if it is asked for one decision more, so no round is lost or repeated across breaks and resumes."""
    decisions = itertools.count()

    def respond(messages):
        n = next(decisions)
        return tool_call("add", {"a": n, "b": 1}) if n < ROUNDS else "done"

    return build_agent(
        ScriptedChatModel(respond=respond, max_calls=ROUNDS + 1),
        [add],
        config=AgentConfig(max_iterations=ROUNDS + 10),
        checkpointer=checkpointer or InMemorySaver(),
        summary_model=ScriptedChatModel(respond=lambda messages: "summary"),
    )


async def _events_output(agent, payload, config) -> dict[str, Any]:
    output: dict[str, Any] = {}
    async for event in agent.astream_events(payload, config, version="v2"):
        if event["event"] == "on_chain_end" and not event["parent_ids"]:
            output = event["data"]["output"]
    return output


# Each path with the recursion limit it really runs with: batch, pipes and astream_events pass LangChain's
# default 25 explicitly; ainvoke without a config gets the agent's own limit. A round takes 6 steps, and
# check_finish goes on only while 10 are left (a round of up to 8 with one parse retry, a circuit break,
# and LangGraph's last step needs 1 left). A fresh invocation's first node has recursion_limit - 1 steps
# left, one that continues a saved thread recursion_limit + 1. So 12 steps hold 1 round per invocation and
# 25 hold 3. The second figure: the rounds after which each invocation on the way to the answer ends.
PATHS = {
    "invoke-recursion-limit-12": (
        lambda agent, payload, config: agent.invoke(payload, {**config, "recursion_limit": 12}),
        list(range(1, ROUNDS + 2)),
    ),
    "batch": (lambda agent, payload, config: agent.batch([payload], config)[0], [*range(3, ROUNDS + 1, 3), ROUNDS + 1]),
    "pipe": (
        lambda agent, payload, config: (RunnableLambda(lambda x: x) | agent).invoke(payload, config),
        [*range(3, ROUNDS + 1, 3), ROUNDS + 1],
    ),
    "astream_events": (
        lambda agent, payload, config: asyncio.run(_events_output(agent, payload, config)),
        [*range(3, ROUNDS + 1, 3), ROUNDS + 1],
    ),
    "ainvoke": (lambda agent, payload, config: asyncio.run(agent.ainvoke(payload, config)), [ROUNDS + 1]),
}


@pytest.mark.parametrize(("run", "ends"), PATHS.values(), ids=PATHS.keys())
def test_thirty_rounds_end_typed_and_resume_to_the_answer_on_every_invocation_path(run, ends):
    agent = thirty_rounds_agent()
    result = run(agent, {"task": "t"}, THREAD)
    finishes = [(result["finish_reason"], result["iteration"])]
    while result["finish_reason"] == "step_limit":
        assert result["final_answer"] is None
        assert agent.get_state(THREAD).values["messages"][-1].name == "circuit_break"
        result = run(agent, None, prepare_resume(agent, THREAD))
        finishes.append((result["finish_reason"], result["iteration"]))
    assert ends[-1] == ROUNDS + 1
    assert finishes == [("step_limit", end) for end in ends[:-1]] + [("answered", ROUNDS + 1)]
    assert result["final_answer"] == "done"


def parse_retries_every_round_agent(retries: int, **settings):
    """The longest rounds there are: every decision is unreadable `retries` times, then a call."""
    replies = itertools.count()

    def respond(messages):
        n = next(replies)
        return "no JSON here" if n % (retries + 1) < retries else json_action("add", {"a": n, "b": 1})

    model = ScriptedChatModel(respond=respond)
    config = AgentConfig(protocol="json", max_parse_retries=retries, max_iterations=100)
    return build_agent(model, [add], config=config.model_copy(update=settings)), model


def test_without_a_caller_limit_max_iterations_governs_even_the_longest_rounds():
    agent, model = parse_retries_every_round_agent(MAX_PARSE_RETRIES, max_iterations=10)
    result = agent.invoke({"task": "t"})
    assert (result["finish_reason"], result["iteration"]) == ("max_iterations", 10)
    assert len(model.calls) == 10 * (MAX_PARSE_RETRIES + 1)


@pytest.mark.parametrize("limit", range(10, 50))
def test_rounds_of_the_most_steps_stop_exactly_when_the_next_could_not_finish(limit):
    agent, model = parse_retries_every_round_agent(1)
    result = agent.invoke({"task": "t"}, {"recursion_limit": limit})
    # 8 steps a round: check_finish of round k has limit - 8k steps left and goes on only while 10 are (the
    # next round, a circuit break, and 1 for the last step); so no recursion error, and no round given up
    # that would have fit.
    assert (result["finish_reason"], result["iteration"]) == ("step_limit", (limit - 10) // 8 + 1)
    assert len(model.calls) == 2 * result["iteration"]


@pytest.mark.parametrize("retries", [0, 1, 3], ids=lambda r: f"max_parse_retries={r}")
def test_a_limit_that_cannot_hold_one_round_is_refused_before_anything_is_saved(retries):
    needed = round_steps(retries) + 2
    agent = build_agent(
        ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": len(messages), "b": 1})),
        [add],
        config=AgentConfig(max_parse_retries=retries),
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(ConfigurationError, match=f"recursion_limit={needed - 1} cannot hold one round .*{needed}"):
        agent.invoke({"task": "t"}, {**THREAD, "recursion_limit": needed - 1})
    assert agent.get_state(THREAD).values == {}
    result = agent.invoke({"task": "t"}, {**THREAD, "recursion_limit": needed})
    assert (result["finish_reason"], result["iteration"]) == ("step_limit", 1)


def test_remaining_steps_is_never_saved_nor_returned_nor_in_the_output_schema(saver):
    agent = thirty_rounds_agent(saver)
    result = agent.invoke({"task": "t"}, {**THREAD, "recursion_limit": 25})
    assert result["finish_reason"] == "step_limit" and "remaining_steps" not in result
    resume(agent, THREAD)
    checkpoints = list(saver.list(THREAD))
    assert len(checkpoints) > 20
    for saved in checkpoints:
        assert "remaining_steps" not in saved.checkpoint["channel_values"]
        assert "remaining_steps" not in saved.checkpoint["channel_versions"]
        assert all(channel != "remaining_steps" for _, channel, _ in saved.pending_writes or [])
    assert "remaining_steps" not in agent.get_state(THREAD).values
    assert "remaining_steps" not in agent.get_output_jsonschema()["properties"]


def test_a_thread_saved_before_step_limit_existed_resumes_and_keeps_to_the_caller_limit(saver, monkeypatch):
    # The graph as it was: AgentState for state and output, no managed value.
    with monkeypatch.context() as old_code:
        old_code.setattr(graph_module, "run_state", lambda schema: AgentState)
        old = build_agent(
            ScriptedChatModel(replies=[tool_call("add", {"a": n, "b": 1}) for n in range(3)]),
            [add],
            config=AgentConfig(max_iterations=3),
            checkpointer=saver,
        )
        assert "remaining_steps" not in old.builder.managed
        assert old.invoke({"task": "t"}, THREAD)["finish_reason"] == "max_iterations"

    replies = [tool_call("add", {"a": n, "b": 1}) for n in range(3, 7)] + [AIMessage("done")]
    agent = build_agent(ScriptedChatModel(replies=replies), [add], checkpointer=saver)
    assert "remaining_steps" in agent.builder.managed
    broken = resume(agent, {**THREAD, "recursion_limit": 25})
    assert (broken["finish_reason"], broken["iteration"]) == ("step_limit", 6)
    result = resume(agent, THREAD)
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("answered", "done", 8)


class NotesState(AgentState, total=False):
    notes: list[str]


def test_an_agent_with_its_own_state_schema_also_ends_at_the_step_limit_and_returns_its_keys():
    replies = [tool_call("add", {"a": n, "b": 1}) for n in range(5)] + [AIMessage("done")]
    model = ScriptedChatModel(replies=replies)
    agent = build_agent(model, [add], checkpointer=InMemorySaver(), state_schema=NotesState)
    assert "remaining_steps" in agent.builder.managed
    assert "notes" in agent.get_output_jsonschema()["properties"]
    assert "remaining_steps" not in agent.get_output_jsonschema()["properties"]
    broken = agent.invoke({"task": "t"}, {**THREAD, "recursion_limit": 25})
    assert broken["finish_reason"] == "step_limit" and "remaining_steps" not in broken
    assert resume(agent, THREAD)["final_answer"] == "done"
