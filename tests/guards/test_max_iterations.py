"""The iteration budget (`reinloop.guards.max_iterations`): a run ends after max_iterations decisions with an
explanation, before LangGraph's recursion limit; a resume gets a fresh budget, enforced again."""

import itertools

from langchain_core.messages import HumanMessage

from reinloop import AgentConfig, build_agent, resume
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import THREAD, add, make_agent


def test_max_iterations_ends_the_run_with_an_explanation():
    agent, model = make_agent([tool_call("add", {"a": i, "b": 0}) for i in range(10)], max_iterations=4)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], result["final_answer"]) == ("max_iterations", 4, None)
    assert len(model.calls) == 4
    assert "no final answer after 4 rounds" in result["messages"][-1].content


def test_the_iteration_guard_trips_before_langgraphs_recursion_limit():
    # 1700 rounds take more than LangGraph's default 10,007 steps: the agent's own guard must end the run.
    numbers = itertools.count()
    model = ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": next(numbers), "b": 0}))
    agent = build_agent(model, [add], config=AgentConfig(max_iterations=1700))
    result = agent.invoke({"task": "t"})
    assert (result["finish_reason"], result["iteration"]) == ("max_iterations", 1700)


def test_resume_after_max_iterations_with_a_fresh_budget_and_a_hint():
    script = [tool_call("add", {"a": i, "b": 0}) for i in range(3)] + [tool_call("add", {"a": 9, "b": 9}), "18"]
    agent, model = make_agent(script, max_iterations=3)
    broken = agent.invoke({"task": "t"}, THREAD)
    assert (broken["finish_reason"], broken["iteration"]) == ("max_iterations", 3)

    result = resume(agent, THREAD, extra_iterations=2, hint="Add 9 and 9, then answer.")
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("answered", "18", 5)
    assert model.calls[3].messages[-1] == HumanMessage(
        "Hint from the operator, who resumed this run after it stopped: Add 9 and 9, then answer.",
        id=model.calls[3].messages[-1].id,
    )


def test_resume_budget_is_enforced_again():
    agent, model = make_agent([tool_call("add", {"a": i, "b": 0}) for i in range(10)], max_iterations=2)
    agent.invoke({"task": "t"}, THREAD)
    result = resume(agent, THREAD, extra_iterations=3)
    assert (result["finish_reason"], result["iteration"]) == ("max_iterations", 5)
    assert len(model.calls) == 5
    # without extra_iterations the agent's own max_iterations is the fresh budget
    result = resume(agent, THREAD)
    assert (result["finish_reason"], result["iteration"]) == ("max_iterations", 7)
