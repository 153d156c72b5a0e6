"""The peers on a model that writes its calls as text: native calls read with the protocol's parser."""

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from reinloop.protocols import OBSERVATION_LABEL, get_protocol
from reinloop.testing import ScriptedChatModel, json_action
from reinloop_eval.written_calls import WrittenToolCalls
from tests.conftest import add


def test_create_agent_runs_a_json_protocol_model_through_native_calls():
    model = ScriptedChatModel(replies=[json_action("add", {"a": 2, "b": 3}), json_action("final_answer", "5")])
    agent = create_agent(WrittenToolCalls(model=model, protocol=get_protocol("json")), [add])
    messages = agent.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"]
    assert messages[1].tool_calls[0]["name"] == "add" and messages[1].tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert messages[2].text == "5" and messages[-1].text == "5"
    # the model got the protocol's prompt: the tools in the system prompt, its call and the result as text
    second = model.calls[1].messages
    assert isinstance(second[0], SystemMessage) and "- add" in second[0].text and "required" in second[0].text
    assert isinstance(second[-2], AIMessage) and '"action": "add"' in second[-2].text
    assert isinstance(second[-1], HumanMessage) and second[-1].text == OBSERVATION_LABEL + "5"


@pytest.mark.parametrize("protocol", ["json", "react", "call_tool"])
def test_an_unreadable_reply_is_a_malformed_call_shown_back_as_written(protocol):
    model = ScriptedChatModel(replies=["{not json at all", "{not json at all"])
    agent = create_agent(WrittenToolCalls(model=model, protocol=get_protocol(protocol)), [add])
    messages = agent.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"]
    # create_agent ends its run on a reply of malformed calls only, as with a provider's
    assert messages[-1].invalid_tool_calls and messages[-1].invalid_tool_calls[0]["error"]
    assert not messages[-1].tool_calls and len(model.calls) == 1
