import enum
import json
from typing import get_args

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, ConfigurationError, build_agent
from reinloop.config import ProtocolName
from reinloop.context import AgentContext
from reinloop.protocols import (
    CUT_REPLY_QUOTED_CHARS,
    PROTOCOLS,
    DecisionProtocol,
    JsonProtocol,
    ToolCallingProtocol,
    cut_off,
    extract_json_object,
    get_protocol,
    read_reply,
)
from reinloop.testing import ScriptedChatModel, cut_reply, json_action, parallel_calls, tool_call
from reinloop.tools import ToolRegistry
from tests.conftest import THREAD, add, lookup, make_agent

REGISTRY = ToolRegistry([add, lookup])
ACTION = {"thought": "t", "action": "add", "action_input": {"a": 1, "b": 2}}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(ACTION),
        "```json\n" + json.dumps(ACTION) + "\n```",
        "Sure, here is my action:\n```\n" + json.dumps(ACTION, indent=2) + "\n```\nHope that helps.",
        "I will add them. " + json.dumps(ACTION) + " That is my decision.",
        'Context {"note": "not the action"} then ' + json.dumps(ACTION),
    ],
    ids=["bare", "json-fence", "fence-in-prose", "inline-in-prose", "prefers-object-with-action"],
)
def test_extract_json_object_finds_the_action(text):
    assert extract_json_object(text) == ACTION


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty"),
        ("I think the answer is 4.", "no JSON object"),
        ('{"action": "add", "action_input": {"a": 1,}}', "invalid JSON"),
        ("{" * 10_000, "invalid JSON"),
        ("x" * 200_000, "characters long"),
    ],
    ids=["empty", "prose-only", "trailing-comma", "brace-bomb", "runaway"],
)
def test_extract_json_object_says_what_is_wrong(text, error):
    with pytest.raises(ValueError, match=error):
        extract_json_object(text)


def test_json_protocol_parses_a_tool_call_into_the_normal_form_and_renders_it_back():
    reply = "Let me add.\n```json\n" + json_action("add", {"a": 1, "b": 2}, thought="1 plus 2") + "\n```"
    decision, stored = JsonProtocol().parse(AIMessage(reply), REGISTRY)
    assert decision["kind"] == "act"
    (call,) = decision["calls"]
    assert (call["name"], call["args"]) == ("add", {"a": 1, "b": 2})
    assert stored.tool_calls[0]["id"] == call["id"]
    assert stored.content == "1 plus 2"  # the thought; the call is in tool_calls
    (shown,) = JsonProtocol().render([stored])
    assert json.loads(shown.content) == {"thought": "1 plus 2", "action": "add", "action_input": {"a": 1, "b": 2}}


@pytest.mark.parametrize(
    ("action_input", "args"),
    [
        ("capital_of_france", {"key": "capital_of_france"}),
        ('{"key": "empty"}', {"key": "empty"}),
        (None, {}),
    ],
    ids=["bare-value-for-one-field-tool", "double-encoded-object", "missing-input"],
)
def test_json_protocol_normalizes_action_input(action_input, args):
    decision, _ = JsonProtocol().parse(AIMessage(json_action("lookup", action_input)), REGISTRY)
    assert decision["calls"][0]["args"] == args


def test_json_protocol_rejects_a_bare_value_for_a_multi_field_tool():
    decision, stored = JsonProtocol().parse(AIMessage(json_action("add", "1+2")), REGISTRY)
    assert decision["kind"] == "unparsable"
    assert "['a', 'b']" in decision["error"]
    assert stored is None


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        (json_action("final_answer", "Paris"), "Paris"),
        (json_action("final_answer", {"answer": "Paris"}), "Paris"),
        (json_action("final_answer", 42), "42"),
        # An answer object whose "type" is no JSON type name is an answer, unwrapped as before.
        (json_action("final_answer", {"type": "sedan"}), "sedan"),
        (json_action("final_answer", {"type": ["sedan", "coupe"]}), '["sedan", "coupe"]'),
    ],
    ids=["text", "answer-object", "number", "type-that-is-no-schema", "type-that-is-a-list"],
)
def test_json_protocol_final_answer(reply, answer):
    decision, stored = JsonProtocol().parse(AIMessage(reply), REGISTRY)
    assert decision == {"kind": "answer", "calls": [], "answer": answer, "raw": None, "error": None}
    assert stored is not None


@pytest.mark.parametrize(
    "reply",
    ['{"thought": "hmm"}', json_action("final_answer", ""), '{"action": 3}'],
    ids=["no-action", "empty-answer", "action-not-a-string"],
)
def test_json_protocol_unparsable_replies_keep_the_raw_text(reply):
    decision, stored = JsonProtocol().parse(AIMessage(reply), REGISTRY)
    assert decision["kind"] == "unparsable"
    assert decision["raw"] == reply
    assert stored is None


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": "number", "title": "Total Assets"}])
def test_json_protocol_refuses_a_schema_as_the_final_answer(schema):
    # Small models copy the tool list's schema: taken as the answer, {"type": "string"} would answer "string".
    reply = json_action("final_answer", schema)
    decision, stored = JsonProtocol().parse(AIMessage(reply), REGISTRY)
    assert decision["kind"] == "unparsable" and decision["raw"] == reply and stored is None
    assert "not a JSON Schema" in decision["error"] and '"action_input": "<the answer>"' in decision["error"]


def test_json_protocol_renders_the_window_as_text_turns():
    call = tool_call("add", {"a": 1, "b": 2}, content="adding")
    window = [call, ToolMessage("3", tool_call_id=call.tool_calls[0]["id"]), AIMessage("The sum is 3.")]
    rendered = JsonProtocol().render(window)
    assert isinstance(rendered[0], AIMessage) and not rendered[0].tool_calls
    assert json.loads(rendered[0].content)["action"] == "add"
    # an answer of an earlier run is shown as the model writes one, and reads back as that answer
    assert json.loads(rendered[2].content) == {"thought": "", "action": "final_answer", "action_input": "The sum is 3."}
    assert JsonProtocol().parse(rendered[2], ToolRegistry())[0]["answer"] == "The sum is 3."
    assert isinstance(rendered[1], HumanMessage) and rendered[1].content == "Observation: 3"


def test_json_protocol_instructions_list_tools_with_their_arguments():
    text = JsonProtocol().instructions(REGISTRY)
    assert "final_answer" in text
    assert "- add: Add two integers." in text
    assert '"a": {"title": "A", "type": "integer"}' in text


def test_tool_calling_protocol_reads_calls_answers_and_failures():
    protocol = ToolCallingProtocol()
    decision, stored = protocol.parse(parallel_calls([("add", {"a": 1, "b": 2}), ("lookup", {"key": "x"})]), REGISTRY)
    assert decision["kind"] == "act" and [c["name"] for c in decision["calls"]] == ["add", "lookup"]
    assert stored.tool_calls == decision["calls"]

    decision, stored = protocol.parse(AIMessage("The answer is 3."), REGISTRY)
    assert decision["kind"] == "answer" and decision["answer"] == "The answer is 3."

    bad = AIMessage(
        "",
        invalid_tool_calls=[{"type": "invalid_tool_call", "id": "1", "name": "add", "args": '{"a": 1,', "error": None}],
    )
    decision, stored = protocol.parse(bad, REGISTRY)
    assert decision["kind"] == "unparsable" and '{"a": 1,' in decision["raw"] and stored is None

    decision, stored = protocol.parse(AIMessage(""), REGISTRY)
    assert decision["kind"] == "unparsable" and decision["error"] == "the reply is empty"


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "add", "arguments": {"a": 1, "b": 2}}', [("add", {"a": 1, "b": 2})]),  # OpenAI's keys as text
        (
            '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n</tool_call>',
            [("add", {"a": 1, "b": 2})],
        ),
        ('```json\n{"name": "Lookup", "parameters": {"key": "x"}}\n```', [("lookup", {"key": "x"})]),  # Llama 3's
        (
            '{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}',
            [("add", {"a": 1, "b": 2})],
        ),
        (
            '[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "lookup", "args": {"key": "x"}}]',
            [("add", {"a": 1, "b": 2}), ("lookup", {"key": "x"})],
        ),
    ],
)
def test_tool_calling_protocol_reads_a_call_written_as_text(text, calls):
    decision, stored = ToolCallingProtocol().parse(AIMessage(text), REGISTRY)
    assert decision["kind"] == "act" and [(c["name"], c["args"]) for c in decision["calls"]] == calls
    assert stored.text == "" and stored.tool_calls == decision["calls"]  # kept as the call it was meant to be


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Alice", "arguments": {"age": 3}}',  # not a tool
        '{"name": "add", "arguments": {"a": 1, "b": 2}, "note": "x"}',  # a key a call does not have
        '{"name": "add"}',  # no arguments
        '{"name": "add", "arguments": [1, 2]}',
        'The call would be {"name": "add", "arguments": {"a": 1, "b": 2}}.',  # prose around it: an answer
        '[{"name": "add", "arguments": {"a": 1, "b": 2}}, "and"]',
    ],
)
def test_a_json_answer_that_is_not_exactly_a_call_stays_an_answer(text):
    decision, _ = ToolCallingProtocol().parse(AIMessage(text), REGISTRY)
    assert decision["kind"] == "answer" and decision["answer"] == text


def test_a_call_written_as_text_runs_in_the_loop():
    agent, model = make_agent(['{"name": "add", "arguments": {"a": 2, "b": 3}}', "5"])
    result = agent.invoke({"task": "2 + 3?"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "5")
    assert model.calls[1].messages[-1].content == "5" and model.calls[1].messages[-2].tool_calls[0]["name"] == "add"


def test_tool_calling_protocol_gives_missing_and_duplicate_call_ids_fresh_ones():
    reply = parallel_calls([("add", {"a": 1, "b": 2}), ("add", {"a": 2, "b": 2})], ids=["same", "same"])
    decision, stored = ToolCallingProtocol().parse(reply, REGISTRY)
    ids = [call["id"] for call in decision["calls"]]
    assert len(set(ids)) == 2 and all(ids)
    assert [call["id"] for call in stored.tool_calls] == ids


@pytest.mark.parametrize(
    "bad_id", ["x" * 65, "", None, "\ud83d", "id\x00"], ids=["over-long", "empty", "missing", "surrogate", "nul"]
)
def test_tool_calling_protocol_replaces_unusable_call_ids(bad_id):
    reply = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": bad_id}])
    decision, stored = ToolCallingProtocol().parse(reply, REGISTRY)
    (call,) = decision["calls"]
    assert call["id"] != bad_id and 0 < len(call["id"]) <= 64
    assert stored.tool_calls == decision["calls"]


def test_ids_that_cleaning_would_make_equal_stay_apart():
    # Found by the fuzz test: "\ud83d" and "\udfff" both become "\ufffd" when saved.
    agent, _ = make_agent(
        [parallel_calls([("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})], ids=["\ud83d", "\udfff"]), "done"]
    )
    result = agent.invoke({"task": "add"}, THREAD)
    assert result["final_answer"] == "done"
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["2", "4"]


def test_an_over_long_tool_name_is_an_unparsable_reply_in_both_protocols():
    name = "add" * 100
    decision, stored = ToolCallingProtocol().parse(tool_call(name, {"a": 1}), REGISTRY)
    assert decision["kind"] == "unparsable" and "a tool name of 300 characters" in decision["error"]
    assert stored is None
    decision, stored = JsonProtocol().parse(AIMessage(json_action(name, {"a": 1})), REGISTRY)
    assert decision["kind"] == "unparsable" and "a tool name of 300 characters" in decision["error"]
    assert stored is None


DEEP_REPLIES = {
    "deep-array": "[" * 1_000,
    "deep-object": '{"a":' * 1_000,
    "deep-action-input": '{"action": "add", "action_input": ' + "[" * 3_000,
    "deep-object-in-prose": "I will act: " + '{"a": ' * 2_000,
}


@pytest.mark.parametrize("text", list(DEEP_REPLIES.values()), ids=list(DEEP_REPLIES))
def test_json_nested_too_deeply_is_a_parse_error_not_a_crash(text):
    with pytest.raises(ValueError, match="nested too deeply"):
        extract_json_object(text)
    decision, stored = JsonProtocol().parse(AIMessage(text), REGISTRY)
    assert decision["kind"] == "unparsable" and "nested too deeply" in decision["error"] and stored is None


def test_a_deeply_nested_double_encoded_action_input_is_a_parse_error():
    reply = json.dumps({"action": "add", "action_input": "{" + '"a": {' * 3_000})
    decision, _ = JsonProtocol().parse(AIMessage(reply), REGISTRY)
    assert decision["kind"] == "unparsable" and len(decision["error"]) < 500  # the bad input is quoted cut


def test_a_deeply_nested_reply_gets_the_retry_and_the_run_goes_on():
    agent, model = make_agent(["[" * 1_000, json_action("final_answer", "4")], protocol="json")
    result = agent.invoke({"task": "2 + 2?"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "4")
    assert "nested too deeply" in model.calls[1].messages[-1].content  # the correction hint


# one selector ---------------------------------------------------------------------------------------------


def test_the_registry_holds_every_protocol_name():
    assert sorted(PROTOCOLS) == sorted(get_args(ProtocolName))
    assert all(cls.name == name for name, cls in PROTOCOLS.items())


class NamedJson(JsonProtocol):
    """A custom variant of the json protocol, under the same name (as the embedded model's)."""


class Xml(JsonProtocol):
    name = "xml"


@pytest.mark.parametrize(
    ("config", "custom", "chosen"),
    [
        (AgentConfig(), None, ToolCallingProtocol),
        (AgentConfig(protocol="json"), None, JsonProtocol),
        (AgentConfig(protocol="json"), NamedJson(), NamedJson),
        (AgentConfig(), Xml(), Xml),  # the config names no protocol: a new name is fine
        (AgentConfig(), JsonProtocol(), JsonProtocol),
    ],
    ids=["default", "named", "custom-same-name", "custom-new-name", "custom-default-config"],
)
def test_get_protocol_picks_the_custom_object_or_the_named_class(config, custom, chosen):
    protocol = get_protocol(config, custom)
    assert type(protocol) is chosen
    assert custom is None or protocol is custom


@pytest.mark.parametrize(
    ("config", "custom", "message"),
    [
        (
            AgentConfig(protocol="tool_calling"),
            JsonProtocol(),
            "named 'json', but the config names protocol='tool_calling'",
        ),
        (AgentConfig(protocol="json"), Xml(), "named 'xml', but the config names protocol='json'"),
        (AgentConfig(), JsonProtocol, "must be a DecisionProtocol instance"),
    ],
    ids=["explicit-name-disagrees", "new-name-disagrees", "a-class-not-an-object"],
)
def test_a_custom_protocol_that_disagrees_with_the_config_is_refused_at_build(config, custom, message):
    with pytest.raises(ConfigurationError, match=message):
        build_agent(ScriptedChatModel(replies=[]), [add], config=config, protocol=custom)


def test_build_agent_runs_with_the_custom_protocol():
    model = ScriptedChatModel(replies=[json_action("final_answer", "4")])
    agent = build_agent(model, [add], protocol=NamedJson(), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "2 + 2?"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "4")
    assert not model.calls[0].tools  # the json protocol sends no tool schemas


# tool-schema tokens -------------------------------------------------------------------------------------


class NativeTools(DecisionProtocol):
    """A custom protocol that sends the tools through the model API, as tool calling does."""

    name = "native"
    expected_format = "a tool call"
    bind = ToolCallingProtocol.bind
    instructions = ToolCallingProtocol.instructions
    render = ToolCallingProtocol.render
    parse = ToolCallingProtocol.parse
    tool_schemas = ToolCallingProtocol.tool_schemas


class TextTools(DecisionProtocol):
    """A custom protocol that describes the tools in its instructions and sends none natively."""

    name = "text"
    expected_format = JsonProtocol.expected_format
    bind = JsonProtocol.bind
    instructions = JsonProtocol.instructions
    tool_list = JsonProtocol.tool_list
    render = JsonProtocol.render
    format_decision = JsonProtocol.format_decision
    parse = JsonProtocol.parse


@pytest.mark.parametrize(
    ("protocol", "counted"),
    [(NativeTools(), True), (ToolCallingProtocol(), True), (TextTools(), False), (JsonProtocol(), False)],
    ids=["custom-native", "tool-calling", "custom-text", "json"],
)
def test_tool_schema_tokens_are_counted_when_the_protocol_sends_the_tools(protocol, counted):
    ctx = AgentContext.create(AgentConfig(), REGISTRY, protocol, ScriptedChatModel(replies=[]))
    sent = getattr(ctx.model, "kwargs", {}).get("tools")  # what bind_tools bound, if anything
    assert bool(sent) == counted
    assert ctx.tool_tokens == (ctx.counter.tools(sent) if counted else 0)
    assert counted == (ctx.tool_tokens > 0)


# a reply cut at the output limit ------------------------------------------------------------------------


class FinishReason(enum.Enum):  # as Google's SDK reports a finish reason: an enum member
    STOP = 1
    MAX_TOKENS = 2


@pytest.mark.parametrize(
    "metadata, reason",
    [
        ({"finish_reason": "length"}, "length"),
        ({"stop_reason": "max_tokens"}, "max_tokens"),
        ({"stop_reason": "model_context_window_exceeded"}, "model_context_window_exceeded"),
        ({"finish_reason": FinishReason.MAX_TOKENS}, "max_tokens"),
        ({"finish_reason": "MAX_TOKENS"}, "max_tokens"),
        ({"done_reason": "length"}, "length"),
        ({"stopReason": "max_tokens"}, "max_tokens"),
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "max_output_tokens"),
        ({"finish_reason": "stop"}, None),
        ({"finish_reason": "tool_calls"}, None),
        ({"stop_reason": "end_turn"}, None),
        ({"stop_reason": "tool_use"}, None),
        ({"finish_reason": FinishReason.STOP}, None),
        ({"done_reason": "stop"}, None),
        ({"stopReason": "end_turn"}, None),
        ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, None),
        ({}, None),
    ],
    ids=[
        "openai",
        "anthropic",
        "anthropic-context",
        "google-enum",
        "google-name",
        "ollama",
        "bedrock",
        "openai-responses",
        "openai-stop",
        "openai-tool-calls",
        "anthropic-end",
        "anthropic-tool-use",
        "google-stop",
        "ollama-stop",
        "bedrock-end",
        "openai-responses-filtered",
        "unreported",
    ],
)
def test_cut_off_reads_each_providers_report_of_a_reply_cut_at_its_output_limit(metadata, reason):
    assert cut_off(AIMessage("some text", response_metadata=metadata)) == reason


class AnythingGoes(DecisionProtocol):
    """A custom protocol that reads every reply as a call of add."""

    name = "anything"
    expected_format = "anything"

    def bind(self, model, registry):
        return model

    def instructions(self, registry):
        return ""

    def render(self, messages):
        return list(messages)

    def parse(self, reply, registry):
        call = {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}
        return {"kind": "act", "calls": [call], "answer": None, "raw": None, "error": None}, AIMessage(
            "", tool_calls=[call]
        )


COMPLETE_CALLS = {
    "tool_calling": tool_call("add", {"a": 1, "b": 2}),
    "json": AIMessage(json_action("add", {"a": 1, "b": 2})),
    "react": AIMessage('Thought: add them\nAction: add[{"a": 1, "b": 2}]'),
    "call_tool": AIMessage('CALL_TOOL(add, {"a": 1, "b": 2})'),
    "custom": AIMessage("whatever"),
}


@pytest.mark.parametrize("protocol", list(COMPLETE_CALLS))
def test_a_reply_cut_at_the_output_limit_is_never_read_as_the_complete_call_it_seems_to_hold(protocol):
    chosen = AnythingGoes() if protocol == "custom" else PROTOCOLS[protocol]()
    whole, _ = read_reply(chosen, COMPLETE_CALLS[protocol], REGISTRY)
    assert whole["kind"] == "act" and whole["calls"][0]["args"] == {"a": 1, "b": 2}
    decision, stored = read_reply(chosen, cut_reply(COMPLETE_CALLS[protocol]), REGISTRY)
    assert (decision["kind"], decision["calls"], stored) == ("unparsable", [], None)
    assert decision["error"].startswith("it was cut off by the output limit, unfinished")
    assert "write a shorter reply" in decision["error"]


def test_a_cut_reply_is_quoted_by_its_start_with_its_calls_and_the_tokens_it_reached():
    usage = {"input_tokens": 10, "output_tokens": 1024, "total_tokens": 1034}
    long = cut_reply(AIMessage("I think " * 500, usage_metadata=usage))
    decision, _ = read_reply(ToolCallingProtocol(), long, REGISTRY)
    assert decision["raw"].startswith("I think I think") and len(decision["raw"]) < CUT_REPLY_QUOTED_CHARS + 40
    assert "cut off by the output limit at 1024 tokens" in decision["error"]

    call = AIMessage("", invalid_tool_calls=[{"name": "add", "args": '{"a": 1, "b', "id": "c", "error": None}])
    decision, _ = read_reply(ToolCallingProtocol(), cut_reply(call), REGISTRY)
    assert decision["raw"] == 'add({"a": 1, "b)'
