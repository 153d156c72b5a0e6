"""What a model sends that a checkpointer cannot store never reaches state: the run goes on with feedback.

`json.loads` gives integers beyond 64 bits, nesting hundreds of levels deep and lone surrogates for a
provider's or a model's output; msgpack (every LangGraph checkpointer) refuses the first two, PostgreSQL
text the last. Each case runs end to end on a checkpointer held in memory and on a SQLite file.
"""

import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from reinloop import AgentConfig, build_agent
from reinloop.state import RAW_KEPT_CHARS
from reinloop.storable import MAX_ARGS_CHARS, REPLACEMENT
from reinloop.testing import ScriptedChatModel, json_action, tool_call
from tests.conftest import add, lookup, new_thread


def nested(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def reply_with(protocol: str, name: str, args: dict, thought: str = "") -> AIMessage | str:
    if protocol == "json":
        return json_action(name, args, thought=thought)
    return tool_call(name, args, content=thought)


def answer_with(protocol: str, text: str) -> str:
    return json_action("final_answer", text) if protocol == "json" else text


def run(saver, replies, protocol, thread=None, task="Add them."):
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(model, [add, lookup], config=AgentConfig(protocol=protocol), checkpointer=saver)
    thread = thread or new_thread()
    return agent, model, thread, agent.invoke({"task": task}, thread)


OVER_LONG = {"a": 1, "b": 2, "note": "x" * MAX_ARGS_CHARS}
UNSTORABLE = {
    "int-beyond-64-bits": ({"a": 2**70, "b": 1}, "the 'add' call hold an integer of 71 bits"),
    "nested-300-deep": ({"a": nested(300), "b": 1}, "the 'add' call hold nesting deeper than 64 levels"),
    # the json protocol refuses a reply this long before it is read
    "over-max-args-chars": (OVER_LONG, {"tool_calling": "characters of JSON", "json": "characters long"}),
}


@pytest.mark.parametrize("protocol", ["tool_calling", "json"])
@pytest.mark.parametrize("case", list(UNSTORABLE), ids=list(UNSTORABLE))
def test_unstorable_arguments_are_refused_before_they_are_saved(saver, protocol, case):
    args, problem = UNSTORABLE[case]
    problem = problem if isinstance(problem, str) else problem[protocol]
    script = [
        reply_with(protocol, "add", args),
        reply_with(protocol, "add", {"a": 1, "b": 2}),
        answer_with(protocol, "3"),
        answer_with(protocol, "Still 3."),
    ]
    agent, model, thread, result = run(saver, script, protocol)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "3")
    hint = model.calls[1].messages[-1].content  # the parse-retry hint names the problem
    assert problem in hint and len(hint) < RAW_KEPT_CHARS + 1_500
    calls = [call for m in result["messages"] if isinstance(m, AIMessage) for call in m.tool_calls]
    assert [call["args"] for call in calls] == [{"a": 1, "b": 2}]  # the refused call never entered state

    later = agent.invoke({"task": "And again?"}, thread)  # the saved thread goes on
    assert later["final_answer"] == "Still 3."
    assert agent.get_state(thread).values["final_answer"] == "Still 3."


@pytest.mark.parametrize("protocol", ["tool_calling", "json"])
def test_lone_surrogates_and_nuls_from_the_model_are_cleaned_where_they_enter_state(saver, protocol):
    script = [
        reply_with(protocol, "lookup", {"key": "capital\ud83d"}, thought="I look \ud83d it up"),
        answer_with(protocol, "Paris \ud83d\x00"),
    ]
    _, _, _, result = run(saver, script, protocol)
    assert result["final_answer"] == f"Paris {REPLACEMENT}{REPLACEMENT}"
    call_message = next(m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert call_message.tool_calls[0]["args"] == {"key": f"capital{REPLACEMENT}"}
    assert call_message.content == f"I look {REPLACEMENT} it up"
    result_message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert "\ud83d" not in result_message.content


def test_an_unparsable_reply_is_stored_cut_and_cleaned(saver):
    text = "no json here \ud83d " + "x" * 50_000
    _, _, thread, result = run(saver, [text, text, json_action("final_answer", "ok")], "json")
    assert result["final_answer"] == "ok"
    agent = build_agent(ScriptedChatModel(), [add], checkpointer=saver)
    saved = [s.values["decision"] for s in agent.get_state_history(thread) if "decision" in s.values]
    unparsable = [d for d in saved if d["kind"] == "unparsable"]
    assert unparsable and all(len(d["raw"]) <= RAW_KEPT_CHARS + 40 for d in unparsable)
    assert all("\ud83d" not in d["raw"] for d in unparsable)


def test_provider_metadata_that_cannot_be_stored_is_dropped_and_the_reply_kept(saver):
    reply = AIMessage(
        "The answer is 4.",
        additional_kwargs={"huge": 2**70},
        response_metadata={"deep": nested(300), "model_name": "m"},
    )
    odd = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "c1"}],
                    additional_kwargs={"note": "odd \ud83d"})  # fmt: skip
    result = run(saver, [odd, reply], "tool_calling")[-1]
    assert result["final_answer"] == "The answer is 4."
    ai = [m for m in result["messages"] if isinstance(m, AIMessage)]
    assert ai[0].additional_kwargs == {"note": f"odd {REPLACEMENT}"}
    assert (ai[-1].additional_kwargs, ai[-1].response_metadata) == ({}, {})
    json.dumps([m.model_dump() for m in ai])  # plain data throughout
