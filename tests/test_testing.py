"""The public scripted model is strict: tests built on it must be able to fail."""

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from reinloop.testing import ScriptedChatModel, ScriptExhaustedError, json_action, parallel_calls, tool_call
from tests.conftest import add


def test_queue_mode_replays_in_order_records_inputs_and_fails_when_exhausted():
    model = ScriptedChatModel(replies=["one", AIMessage("two")])
    assert model.invoke("first").content == "one"
    assert model.invoke([HumanMessage("second")]).content == "two"
    assert [call.messages[-1].content for call in model.calls] == ["first", "second"]
    with pytest.raises(ScriptExhaustedError, match="called 3 times, but the script has only 2 replies"):
        model.invoke("third")


def test_scripted_exceptions_are_raised():
    model = ScriptedChatModel(replies=[TimeoutError("slow")])
    with pytest.raises(TimeoutError, match="slow"):
        model.invoke("x")


def test_function_mode_sees_the_messages_and_is_bounded():
    model = ScriptedChatModel(respond=lambda messages: f"you said {messages[-1].content}", max_calls=1)
    assert model.invoke("hi").content == "you said hi"
    with pytest.raises(ScriptExhaustedError, match="max_calls=1"):
        model.invoke("again")


def test_bind_tools_records_the_tool_schemas_on_each_call():
    model = ScriptedChatModel(replies=["x"])
    model.bind_tools([add]).invoke("go")
    (call,) = model.calls
    assert call.tools[0]["function"]["name"] == "add"
    assert call.tools[0]["function"]["parameters"]["required"] == ["a", "b"]


def test_replayed_replies_get_fresh_message_ids():
    reply = tool_call("add", {"a": 1, "b": 1})
    model = ScriptedChatModel(replies=[reply, reply])
    assert model.invoke("a").id != model.invoke("b").id


def test_reply_helpers():
    single = tool_call("add", {"a": 1}, id="c1")
    assert single.tool_calls == [{"name": "add", "args": {"a": 1}, "id": "c1", "type": "tool_call"}]
    double = parallel_calls([("add", {}), ("add", {})])
    assert len({call["id"] for call in double.tool_calls}) == 2
    assert json_action("final_answer", "x") == '{"thought": "", "action": "final_answer", "action_input": "x"}'
