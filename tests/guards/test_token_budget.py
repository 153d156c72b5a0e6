"""The run's token budget (`reinloop.guards.token_budget`): run_token_budget ends the run; a resume grants a new one."""

from reinloop import resume
from reinloop.testing import tool_call
from tests.conftest import THREAD, make_agent


def test_run_token_budget_ends_the_run_and_resume_grants_a_new_one():
    script = [tool_call("add", {"a": i, "b": 1}) for i in range(20)] + ["done"]
    agent, _ = make_agent(script, run_token_budget=1_200)
    result = agent.invoke({"task": "keep adding"}, THREAD)
    assert result["finish_reason"] == "token_budget" and result["final_answer"] is None
    assert result["usage"]["total_tokens"] >= 1_200
    assert "tokens after" in result["messages"][-1].content
    resumed = resume(agent, THREAD)
    assert resumed["finish_reason"] == "token_budget" and resumed["iteration"] > result["iteration"]
