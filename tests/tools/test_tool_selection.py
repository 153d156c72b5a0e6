"""AgentConfig.max_tools: the tools a run shows its model, picked by the model once per run."""

import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, resume
from reinloop.testing import ScriptedChatModel, json_action, tool_call
from reinloop.tools.selection import SELECT_TOOLS_PROMPT, chosen_tools
from tests.conftest import new_thread

PICK = SELECT_TOOLS_PROMPT[:20]
NAMES = [f"tool_{n}" for n in range(8)]


def _tool(name: str) -> StructuredTool:
    def run(x: int) -> str:
        return f"{name} says {x}"

    return StructuredTool.from_function(run, name=name, description=f"The {name} tool: its own numbers.")


TOOLS = [_tool(name) for name in NAMES]


def scripted(pick="tool_6, tool_2", calls=("tool_6", "tool_2", "tool_6"), protocol="tool_calling"):
    """Picks with `pick` (a reply, or an exception to raise), then calls `calls` in turn, then answers."""

    def respond(messages):
        if messages[-1].text.startswith(PICK):
            return pick
        made = sum(1 for m in messages if getattr(m, "tool_calls", None) or '"action": "tool_' in m.text)
        if made < len(calls):
            if protocol == "json":
                return json_action(calls[made], {"x": made})
            return tool_call(calls[made], {"x": made})
        return json_action("final_answer", "done") if protocol == "json" else "done"

    return ScriptedChatModel(respond=respond)


def picks(model):
    return [call for call in model.calls if call.messages[-1].text.startswith(PICK)]


def shown(call):
    return [tool["function"]["name"] for tool in call.tools]


def test_the_model_picks_the_tools_once_and_every_decision_of_the_run_is_shown_only_those():
    model = scripted()
    agent = build_agent(model, TOOLS, config=AgentConfig(max_tools=2))
    result = agent.invoke({"task": "Use tool 6 and tool 2."}, new_thread())
    assert result["finish_reason"] == "answered" and result["tools"] == ["tool_2", "tool_6"]
    [pick] = picks(model)
    assert model.calls[0] is pick and pick.tools == []  # first, with no tools bound: a plain question
    assert all(name in pick.messages[0].text for name in NAMES) and "at most 2" in pick.messages[0].text
    decisions = model.calls[1:]
    assert len(decisions) == 4 and all(shown(call) == ["tool_2", "tool_6"] for call in decisions)
    assert result["usage"]["model_calls"] == 5  # the pick is counted


def test_a_resumed_run_keeps_its_tools_and_a_new_task_picks_again():
    model = scripted(calls=("tool_6",) * 5)
    saver, thread = InMemorySaver(), new_thread()
    agent = build_agent(model, TOOLS, config=AgentConfig(max_tools=2, max_iterations=2), checkpointer=saver)
    assert agent.invoke({"task": "Use tool 6."}, thread)["finish_reason"] == "max_iterations"
    assert len(picks(model)) == 1
    resumed = resume(agent, thread, extra_iterations=10)
    assert resumed["finish_reason"] == "answered" and resumed["tools"] == ["tool_2", "tool_6"]
    assert len(picks(model)) == 1 and all(shown(call) == ["tool_2", "tool_6"] for call in model.calls[1:])
    model.calls.clear()
    again = scripted(pick="tool_0", calls=("tool_0",))
    build_agent(again, TOOLS, config=AgentConfig(max_tools=2), checkpointer=saver).invoke({"task": "Use 0."}, thread)
    assert len(picks(again)) == 1 and shown(again.calls[-1]) == ["tool_0"]


@pytest.mark.parametrize("pick", [ConnectionError("down"), "None of them.", ""])
def test_a_pick_that_fails_or_names_no_tool_shows_every_tool_and_the_run_goes_on(pick):
    model = scripted(pick=pick)
    result = build_agent(model, TOOLS, config=AgentConfig(max_tools=2)).invoke({"task": "t"}, new_thread())
    assert result["finish_reason"] == "answered" and result["tools"] is None
    assert all(shown(call) == NAMES for call in model.calls[1:])


def test_a_call_of_a_tool_the_run_does_not_show_still_runs():
    model = scripted(pick="tool_2", calls=("tool_7",))
    result = build_agent(model, TOOLS, config=AgentConfig(max_tools=1)).invoke({"task": "t"}, new_thread())
    assert result["finish_reason"] == "answered"
    assert any(m.text == "tool_7 says 0" for m in model.calls[-1].messages)


def test_with_no_more_tools_than_the_limit_nothing_is_picked():
    model = scripted()
    result = build_agent(model, TOOLS, config=AgentConfig(max_tools=8)).invoke({"task": "t"}, new_thread())
    assert picks(model) == [] and result.get("tools") is None and shown(model.calls[0]) == NAMES


def test_a_text_protocol_describes_only_the_run_s_tools():
    model = scripted(protocol="json")
    config = AgentConfig(max_tools=2, protocol="json")
    result = build_agent(model, TOOLS, config=config).invoke({"task": "t"}, new_thread())
    assert result["finish_reason"] == "answered"
    system = model.calls[1].messages[0].text
    assert "tool_6" in system and "tool_2" in system and "tool_3" not in system


def test_chosen_tools_reads_whole_names_in_any_shape_the_first_ones_mentioned():
    names = ["get", "get_issue", "list_issues", "search.code"]
    assert chosen_tools("get_issue, list_issues", names, 5) == ["get_issue", "list_issues"]
    assert chosen_tools('{"tools": ["search.code", "get"]}', names, 5) == ["get", "search.code"]
    assert chosen_tools("list_issues then get_issue then get", names, 2) == ["get_issue", "list_issues"]
    assert chosen_tools("get_issues and forget", names, 5) == []
