"""Fuzzing the model: whatever it replies, every run ends with a typed reason and a state that can be saved.

Random replies (text, JSON-ish text, deep nesting, huge integers, lone surrogates, NULs, huge strings, tool
calls with random names, arguments and ids, invalid tool calls, empty replies, list content) are played by
the scripted model through the compiled agent, for every protocol, without a checkpointer, on a checkpointer
in memory and on a SQLite file. REINLOOP_FUZZ_EXAMPLES sets the examples per protocol (default 200).
"""

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.memory import pairing_violations
from reinloop.protocols import FINAL_ANSWER_ACTION, CallToolProtocol, ReactProtocol
from reinloop.state import FINISH_REASONS
from reinloop.testing import ScriptedChatModel, json_action, parallel_calls
from tests.conftest import add, explode, lookup, new_thread

EXAMPLES = int(os.environ.get("REINLOOP_FUZZ_EXAMPLES", "200"))
# Characters a provider's JSON can hand over: lone surrogates, NUL, JSON and fence syntax, non-ASCII.
ODD = ["\ud83d", "\udfff", "\x00", "\ufffd", "é", "🙂", "\n", '"', "\\", "{", "}", "[", "]", "```", "final_answer"]


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


short_text = st.one_of(
    st.text(max_size=30), st.lists(st.sampled_from(ODD) | st.text(max_size=6), max_size=10).map("".join)
)
huge_text = st.builds(
    str.__mul__,
    st.sampled_from(["x", "word ", "{", "[", '{"a": ', "\ud83d", "é"]),
    st.sampled_from([300, 2_500, 30_000, 120_000]),
)
texts = st.one_of(short_text, short_text, short_text, huge_text)
integers = st.one_of(st.integers(-10, 10), st.integers(-(2**80), 2**80), st.sampled_from([2**63, 2**64, -(2**63) - 1]))
leaves = st.one_of(st.none(), st.booleans(), integers, st.floats(), short_text)
json_values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(short_text, children, max_size=4),
    max_leaves=10,
)
values = st.one_of(
    json_values, json_values, st.builds(nested, st.sampled_from([20, 64, 65, 70, 300]), leaves), huge_text
)
arguments = st.one_of(
    st.dictionaries(short_text, values, max_size=4),
    st.fixed_dictionaries({"a": integers, "b": integers}),
    st.fixed_dictionaries({"key": st.sampled_from(["capital_of_france", "empty", "nope"]) | texts}),
    st.fixed_dictionaries({"reason": texts}),
)
tool_names = st.sampled_from(["add", "lookup", "explode", FINAL_ANSWER_ACTION, "", "nope", "a" * 300]) | short_text
call_ids = st.one_of(st.none(), st.just("same"), st.text(max_size=12), st.just("i" * 100), st.sampled_from(ODD))
blocks = st.one_of(
    texts,
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.just({"type": "image_url", "image_url": {"url": "data:,x"}}),
    st.fixed_dictionaries({"type": st.just("odd"), "value": values}),
)
content = texts | st.lists(blocks, max_size=3)
tool_calls = st.lists(
    st.fixed_dictionaries({"name": tool_names, "args": arguments, "id": call_ids, "type": st.just("tool_call")}),
    min_size=1,
    max_size=4,
)
invalid_calls = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.just("invalid_tool_call"),
            "name": st.none() | tool_names,
            "args": st.none() | texts,
            "id": call_ids,
            "error": st.none() | short_text,
        }
    ),
    min_size=1,
    max_size=2,
)
metadata = st.dictionaries(short_text, values, max_size=2)
ai_messages = st.one_of(
    st.builds(AIMessage, content=content, tool_calls=tool_calls),
    st.builds(AIMessage, content=content, invalid_tool_calls=invalid_calls),
    st.builds(AIMessage, content=content),
    st.builds(
        AIMessage,
        content=content,
        tool_calls=st.just([]) | tool_calls,
        additional_kwargs=metadata,
        response_metadata=metadata,
    ),
    st.just(AIMessage(content="")),
    st.just(AIMessage(content=[])),
)


def json_text(value: Any) -> str:
    return json.dumps(value)  # ASCII escapes: a lone surrogate travels as "\ud83d", as providers send it


actions = st.fixed_dictionaries(
    {"thought": short_text, "action": tool_names, "action_input": st.one_of(arguments, values, short_text)}
).map(json_text)


def cut_short(text: str, tenths: int) -> str:
    return text[: len(text) * tenths // 10]


def deep_answer(depth: int) -> str:
    return '{"action": "final_answer", "action_input": ' + "[" * depth + "]" * depth + "}"


json_replies = st.one_of(
    actions,
    actions,
    actions.map("```json\n{}\n```".format),
    st.tuples(short_text, actions, short_text).map(" ".join),
    st.builds(cut_short, actions, st.integers(0, 9)),
    values.map(json_text),
    st.builds(str.__mul__, st.sampled_from(["[", '{"a":', '{"action": "add", "action_input": ']), st.just(3_000)),
    st.builds(deep_answer, st.sampled_from([100, 900, 2_000])),
    texts,
)
# Well-formed calls too, so that tools run, succeed, fail, repeat (dead loops) and use up the budgets.
GOOD_CALLS = [("add", {"a": 2, "b": 3}), ("lookup", {"key": "capital_of_france"}), ("lookup", {"key": "empty"}),
              ("explode", {"reason": "why"})]  # fmt: skip
good_replies = {
    "tool_calling": st.lists(st.sampled_from(GOOD_CALLS), min_size=1, max_size=3).map(parallel_calls),
    "json": st.sampled_from(GOOD_CALLS).map(lambda call: json_action(*call)),
}
TEXT_FORMATS = {"react": ReactProtocol(), "call_tool": CallToolProtocol()}


def text_call(protocol: str, name: str, args: Any, thought: str) -> str:
    """A call in a text protocol's form, its arguments as JSON, a bare value or raw text."""
    argument = args if isinstance(args, str) else json_text(args)
    return TEXT_FORMATS[protocol].format_decision(thought, [{"name": name, "args": {}}]).replace("{}", argument)


def text_replies(protocol: str) -> st.SearchStrategy[str]:
    label = TEXT_FORMATS[protocol].answer_label
    calls = st.builds(text_call, st.just(protocol), tool_names, st.one_of(arguments, values, short_text), short_text)
    return st.one_of(
        calls,
        calls.map("```\n{}\n```".format),
        st.tuples(short_text, calls, short_text).map(" ".join),
        st.builds(cut_short, calls, st.integers(0, 9)),
        short_text.map(f"{label} {{}}".format),
        json_replies,
        texts,
    )


for text_protocol in TEXT_FORMATS:
    good_replies[text_protocol] = st.sampled_from(GOOD_CALLS).map(
        lambda call, protocol=text_protocol: text_call(protocol, *call, "")
    )
replies = {
    "tool_calling": st.one_of(ai_messages, ai_messages, texts, good_replies["tool_calling"]),
    "json": st.one_of(json_replies, json_replies, ai_messages, good_replies["json"]),
    **{
        name: st.one_of(text_replies(name), text_replies(name), ai_messages, good_replies[name])
        for name in TEXT_FORMATS
    },
}


def repeating(start: list[Any], reply: Any, times: int) -> list[Any]:
    return [*start, *[reply] * times]


def scripts(protocol: str) -> st.SearchStrategy[list[Any]]:
    """Random replies, or a few then the same call again and again (a dead loop)."""
    some = st.lists(replies[protocol], max_size=12)
    loops = st.builds(repeating, st.lists(replies[protocol], max_size=3), good_replies[protocol], st.integers(3, 5))
    return some | loops


FINAL = {
    "tool_calling": "done",
    "json": json_text({"action": FINAL_ANSWER_ACTION, "action_input": "done"}),
    "react": "Final Answer: done",
    "call_tool": "FINAL: done",
}
limits = st.fixed_dictionaries(
    {
        "max_iterations": st.integers(1, 8),
        "max_parse_retries": st.integers(0, 2),
        "memory_capacity": st.integers(1, 4),
        "compress_every": st.integers(1, 3),
        "context_token_budget": st.sampled_from([1_500, 6_000]),
        "run_token_budget": st.none() | st.integers(2_000, 20_000),
    }
)


@pytest.fixture(scope="module")
def savers(tmp_path_factory):
    sqlite = sqlite_checkpointer(tmp_path_factory.mktemp("fuzz") / "fuzz.sqlite")
    yield {"none": None, "memory": InMemorySaver(), "sqlite": sqlite}
    sqlite.conn.close()


def scripted(script: list[Any], protocol: str) -> ScriptedChatModel:
    """Plays `script`, then answers; it also writes the summaries, with whatever reply comes next."""
    queue = list(script)

    def respond(messages: list[BaseMessage]) -> Any:
        return queue.pop(0) if queue else FINAL[protocol]

    return ScriptedChatModel(respond=respond)


@pytest.mark.parametrize("protocol", list(FINAL))
def test_any_reply_ends_the_run_with_a_typed_reason_and_a_storable_state(protocol, savers):
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(script=scripts(protocol), config=limits, saver=st.sampled_from(["none", "memory", "sqlite"]))
    def run(script, config, saver):
        checkpointer = savers[saver]
        agent = build_agent(
            scripted(script, protocol),
            [add, lookup, explode],
            config=AgentConfig(protocol=protocol, **config),
            checkpointer=checkpointer,
        )
        thread = new_thread() if checkpointer is not None else None
        result = agent.invoke({"task": "Add 2 and 3, then look up the capital of France."}, thread)

        assert result["finish_reason"] in FINISH_REASONS
        assert result["iteration"] <= config["max_iterations"]
        assert pairing_violations(result["messages"]) == []
        values = result
        if checkpointer is not None:
            saved = agent.get_state(thread)
            assert saved.next == () and saved.values["finish_reason"] == result["finish_reason"]
            values = saved.values
        serde = JsonPlusSerializer()  # LangGraph's checkpoint serializer: the state saves and loads again
        serde.loads_typed(serde.dumps_typed(values))

    run()
