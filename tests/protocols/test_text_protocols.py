"""The text protocols of the seeds: react (seed 002) and call_tool (seed 004).

Round trips over the default toolset, what small models write that must still be read, replies that must be
refused with a precise error (never a crash), and runs of the compiled agent with text replies.
"""

import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from reinloop.nodes import validate_args
from reinloop.protocols import PROTOCOLS, CallToolProtocol, ReactProtocol
from reinloop.state import unparsable
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import ToolRegistry
from reinloop.tools.toolset import default_toolset
from tests.conftest import THREAD, add, explode, lookup, make_agent, make_context

REGISTRY = ToolRegistry([add, lookup, explode])
TEXT_PROTOCOLS = {"react": ReactProtocol(), "call_tool": CallToolProtocol()}
ADD = {"a": 1, "b": 2}

# Arguments for every tool of the default toolset, with what text formats find hard: brackets, parentheses,
# quotes, commas, newlines, a label inside a string, non-ASCII.
SAMPLE_ARGS = {
    "web_search": {"query": 'Eiffel tower "height" [m], (2024)', "max_results": 3},
    "calculator": {"expression": "(2 + 3) * 4 / (1 - 0.5)"},
    "translate": {"text": "Bonjour, le monde!\nObservation: not a label", "target_language": "English"},
    "file_read": {"path": "notes/a b].md"},
    "file_write": {"path": "out.md", "content": "# Title\nFinal Answer: not one\n```x```", "mode": "append"},
    "current_time": {},
    "timer": {"seconds": 1.5},
    "db_insert": {"table": "notes", "values": {"title": "é 🙂", "body": "CALL_TOOL(x, {})"}},
    "db_query": {"sql": "SELECT * FROM notes WHERE title = 'a)' LIMIT 2", "max_rows": 2},
    "weather": {"city": "São Paulo"},
    "financial_data": {"company": "ACME", "metric": "revenue", "year": 2023},
}


@pytest.fixture(scope="module")
def toolset(tmp_path_factory):
    tools = default_toolset(
        tmp_path_factory.mktemp("ws"), model=ScriptedChatModel(), weather_base_url="http://127.0.0.1:9"
    )
    return ToolRegistry(tools)


def parse(protocol, text, registry=REGISTRY):
    return protocol.parse(AIMessage(text), registry)


# round trips -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(TEXT_PROTOCOLS.values()), ids=list(TEXT_PROTOCOLS))
def test_every_default_tool_call_round_trips_through_render_and_parse(protocol, toolset):
    assert sorted(SAMPLE_ARGS) == sorted(toolset.names)  # a new default tool needs a sample here
    for name, args in SAMPLE_ARGS.items():
        assert toolset[name].validate(args)[0] == []
        stored = tool_call(name, args, content="I need it.\nSo I call it.")
        (shown,) = protocol.render([stored])
        assert isinstance(shown, AIMessage) and not shown.tool_calls  # text, as the model writes it
        decision, again = parse(protocol, shown.content, toolset)
        assert decision["kind"] == "act", (name, shown.content, decision["error"])
        (call,) = decision["calls"]
        assert (call["name"], call["args"]) == (name, args), shown.content
        assert again.content == "I need it.\nSo I call it."
        assert again.tool_calls == decision["calls"]


@pytest.mark.parametrize("protocol", list(TEXT_PROTOCOLS.values()), ids=list(TEXT_PROTOCOLS))
def test_a_final_answer_round_trips(protocol):
    (shown,) = protocol.render([AIMessage("Paris, France.\nSecond line.")])
    assert shown.content == f"{protocol.answer_label} Paris, France.\nSecond line."
    decision, stored = parse(protocol, shown.content)
    assert (decision["kind"], decision["answer"]) == ("answer", "Paris, France.\nSecond line.")
    assert stored.content == "Paris, France.\nSecond line." and not stored.tool_calls


@pytest.mark.parametrize(
    ("protocol", "text"),
    [
        ("react", "Action: calculator[2 + 3]"),
        ("react", "Action: web_search[2 + 3]"),  # one required argument of two
        ("react", "Action: db_query[2 + 3]"),
        ("call_tool", "CALL_TOOL(calculator, 2 + 3)"),
        ("call_tool", "CALL_TOOL(web_search, 2 + 3)"),
        ("call_tool", 'CALL_TOOL(calculator, "2 + 3")'),
    ],
)
def test_a_bare_value_is_the_argument_of_a_one_argument_tool(protocol, text, toolset):
    decision, _ = parse(TEXT_PROTOCOLS[protocol], text, toolset)
    (call,) = decision["calls"]
    field = toolset[call["name"]].schema_json["required"][0]
    assert call["args"] == {field: "2 + 3"}


@pytest.mark.parametrize("protocol", list(TEXT_PROTOCOLS.values()), ids=list(TEXT_PROTOCOLS))
def test_a_bare_value_for_a_tool_of_several_arguments_is_refused_with_the_object_form(protocol, toolset):
    decision, stored = parse(protocol, protocol.format_call("file_write", "notes.md"), toolset)
    assert decision["kind"] == "unparsable" and stored is None
    assert "'file_write' takes several arguments (path, content, mode)" in decision["error"]
    assert protocol.format_call("file_write", '{"path": ..., "content": ...}') in decision["error"]


# what small models write -----------------------------------------------------------------------------------

LOOKUP = ("lookup", {"key": "capital_of_france"})
REACT_READABLE = {
    "canonical": ('Thought: add them\nAction: add[{"a": 1, "b": 2}]', ("add", ADD), "add them"),
    "no-thought": ('Action: add[{"a": 1, "b": 2}]', ("add", ADD), ""),
    "lower-case-labels-and-name": ('thought: add them\naction: ADD[{"a": 1, "b": 2}]', ("add", ADD), "add them"),
    "upper-case-label": ("ACTION: lookup[capital_of_france]", LOOKUP, ""),
    "markdown": ('**Thought:** add them\n**Action:** add[{"a": 1, "b": 2}]', ("add", ADD), "add them"),
    "fenced": ('```\nThought: add them\nAction: add[{"a": 1, "b": 2}]\n```', ("add", ADD), "add them"),
    "fenced-with-language": ("```text\nAction: lookup[capital_of_france]\n```", LOOKUP, ""),
    "one-line": ("Thought: look it up. Action: lookup[capital_of_france]", LOOKUP, "look it up."),
    "prose-before": ('I will add.\nAction: add[{"a": 1, "b": 2}]', ("add", ADD), "I will add."),
    "spacing": ("Action :lookup[ capital_of_france ]", LOOKUP, ""),
    "quoted-value": ('Action: lookup["capital_of_france"]', LOOKUP, ""),
    "single-quoted-value": ("Action: lookup['capital_of_france']", LOOKUP, ""),
    "parentheses": ("Action: lookup(capital_of_france)", LOOKUP, ""),
    "action-input-line": ("Action: lookup\nAction Input: capital_of_france", LOOKUP, ""),
    "json-action-input": ('Action: add\nAction Input: {"a": 1, "b": 2}', ("add", ADD), ""),
    "trailing-text": ('Action: add[{"a": 1, "b": 2}] and then I will answer.', ("add", ADD), ""),
    "imagined-observation": (
        "Action: lookup[capital_of_france]\nObservation: Paris\nFinal Answer: Paris",
        LOOKUP,
        "",
    ),
    "json-over-lines": ('Action: add[{\n  "a": 1,\n  "b": 2\n}]', ("add", ADD), ""),
    "json-missing-bracket": ('Action: add[{"a": 1, "b": 2}', ("add", ADD), ""),
    "backticked-name": ("Action: `lookup`[capital_of_france]", LOOKUP, ""),
    "lower-case-action-in-thought": (
        "Thought: the next action: lookup\nAction: lookup[capital_of_france]",
        LOOKUP,
        "the next action: lookup",
    ),
}
CALL_TOOL_READABLE = {
    "canonical": ('CALL_TOOL(add, {"a": 1, "b": 2})', ("add", ADD), ""),
    "lower-case": ('call_tool(add, {"a": 1, "b": 2})', ("add", ADD), ""),
    "spaces": ('CALL TOOL ( add , {"a":1,"b":2} )', ("add", ADD), ""),
    "quoted-name": ('CALL_TOOL("add", {"a": 1, "b": 2})', ("add", ADD), ""),
    "name-case": ('CALL_TOOL(Add, {"a": 1, "b": 2})', ("add", ADD), ""),
    "fenced": ('```\nCALL_TOOL(add, {"a": 1, "b": 2})\n```', ("add", ADD), ""),
    "reasoning-before": ('I will add them.\nCALL_TOOL(add, {"a": 1, "b": 2})', ("add", ADD), "I will add them."),
    "thought-label": ('Thought: I will add.\nCALL_TOOL(add, {"a": 1, "b": 2})', ("add", ADD), "I will add."),
    "trailing-text": ('CALL_TOOL(add, {"a": 1, "b": 2}) then I answer (soon).', ("add", ADD), ""),
    "bare-value": ("CALL_TOOL(lookup, capital_of_france)", LOOKUP, ""),
    "quoted-bare-value": ('CALL_TOOL(lookup, "capital_of_france")', LOOKUP, ""),
    "json-over-lines": ('CALL_TOOL(add, {\n  "a": 1,\n  "b": 2\n})', ("add", ADD), ""),
    "missing-parenthesis": ('CALL_TOOL(add, {"a": 1, "b": 2}', ("add", ADD), ""),
    "no-arguments": ("CALL_TOOL(lookup)", ("lookup", {}), ""),
}


@pytest.mark.parametrize(
    ("name", "text", "expected", "thought"),
    [("react", *case) for case in REACT_READABLE.values()] + [("call_tool", *c) for c in CALL_TOOL_READABLE.values()],
    ids=[f"react-{k}" for k in REACT_READABLE] + [f"call_tool-{k}" for k in CALL_TOOL_READABLE],
)
def test_what_small_models_write_is_read(name, text, expected, thought):
    decision, stored = parse(TEXT_PROTOCOLS[name], text)
    assert decision["kind"] == "act", decision["error"]
    (call,) = decision["calls"]
    assert (call["name"], call["args"]) == expected
    assert stored.content == thought and stored.tool_calls == decision["calls"]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("react", "Final Answer: Paris"),
        ("react", "final answer:Paris"),
        ("react", "FINAL_ANSWER: Paris"),
        ("react", "Thought: I know it.\nFinal Answer: Paris"),
        ("react", "```\nFinal Answer: Paris\n```"),
        ("react", "I know it. Final Answer: Paris"),
        ("react", "Final Answer: Paris\nThought: that was easy"),
        ("call_tool", "FINAL: Paris"),
        ("call_tool", "final: Paris"),
        ("call_tool", "Final Answer: Paris"),
        ("call_tool", "I know it.\nFINAL: Paris"),
        ("call_tool", "```\nFINAL: Paris\n```"),
        ("call_tool", "I know it. FINAL: Paris"),
    ],
)
def test_final_answers_are_read(name, text):
    decision, stored = parse(TEXT_PROTOCOLS[name], text)
    assert (decision["kind"], decision["answer"]) == ("answer", "Paris")
    assert stored.content == "Paris"


def test_the_first_decision_wins():
    decision, _ = parse(ReactProtocol(), "Final Answer: 3\nAction: add[1]")
    assert decision["answer"] == "3"
    decision, _ = parse(CallToolProtocol(), 'CALL_TOOL(lookup, x)\nFINAL: 3\nCALL_TOOL(add, {"a": 1, "b": 1})')
    assert decision["calls"][0]["args"] == {"key": "x"} and len(decision["calls"]) == 1


def test_an_unknown_tool_with_a_bare_value_is_left_to_validation():
    # validate_args names the closest tool or lists them, which a parse error could not
    for protocol in TEXT_PROTOCOLS.values():
        decision, _ = parse(protocol, protocol.format_call("calc", "2 + 3"))
        assert decision["kind"] == "act" and decision["calls"][0]["name"] == "calc"


# malformed replies -----------------------------------------------------------------------------------------

NESTED = '{"a": ' * 3_000
REACT_MALFORMED = [
    "",
    "  \n  ",
    "```\n```",
    "I think the answer is 4.",
    "Thought: I should add 1 and 2.",
    "Thought: adding\nObservation: 3",
    "Observation: 3",
    "Action Input: 2+3",
    "Thought: the next action: add them",
    "Action:",
    "Action: [1, 2]",
    "Action: add",
    "Action: `add`",
    "Action: add 1 2",
    "Action: add[1, 2]",
    'Action: add["1", "2"]',
    'Action: add[{"a": 1, "b": }]',
    "Action: add[{'a': 1, 'b': 2}]",
    'Action: add[{"a": 1, "b": 2} extra]',
    'Action: add[{"a": 1,}]',
    "Action: lookup[capital",
    "Action: lookup(capital",
    "Action: lookup[[capital]",
    "Action: look up[capital]",
    "Action: I will use add[1]",
    "Final Answer:",
    "Final Answer:   \n",
    "Thought: done\nFinal Answer:",
    "Final answer",
    "Action - add[1]",
    '{"action": "add", "action_input": {"a": 1, "b": 2}}',
    'CALL_TOOL(add, {"a": 1, "b": 2})',
    "x" * 200_000,
    "Action: " + "a" * 300 + "[1]",
    "Action: add[" + NESTED + "]",
]
CALL_TOOL_MALFORMED = [
    "",
    "  \n ",
    "```\n```",
    "I think the answer is 4.",
    "Thought: I will call add",
    "FINAL:",
    "FINAL:   \n ",
    "FINAL",
    "Final answer is 4",
    "CALL_TOOL()",
    'CALL_TOOL(, {"a": 1})',
    'CALL_TOOL(add {"a": 1, "b": 2})',
    'CALL_TOOL(add; {"a": 1})',
    'CALL_TOOL(add, {"a": 1, "b": })',
    "CALL_TOOL(add, {'a': 1, 'b': 2})",
    'CALL_TOOL(add, {"a": 1, "b": 2} extra)',
    'CALL_TOOL(add, {"a": 1,})',
    'CALL_TOOL(add, {"a" 1})',
    'CALL_TOOL(add, {"a": 1, "b": 2]',
    "CALL_TOOL(add, 1, 2)",
    "CALL_TOOL(add, [1, 2])",
    "CALL_TOOL(lookup, capital",
    "CALL_TOOL(add, \n",
    'CALL_TOOL(the add tool, {"a": 1})',
    'CALL_TOOL add {"a": 1}',
    'CALL_TOOL[add, {"a": 1}]',
    "CALLTOOL:add",
    'TOOL(add, {"a": 1})',
    '{"action": "add", "action_input": {"a": 1, "b": 2}}',
    "Action: add[1]",
    "x" * 200_000,
    "CALL_TOOL(" + "a" * 300 + ", {})",
    "CALL_TOOL(add, " + NESTED + ")",
]


@pytest.mark.parametrize(
    ("name", "text"),
    [("react", text) for text in REACT_MALFORMED] + [("call_tool", text) for text in CALL_TOOL_MALFORMED],
    ids=[f"react-{n}" for n in range(len(REACT_MALFORMED))]
    + [f"call_tool-{n}" for n in range(len(CALL_TOOL_MALFORMED))],
)
def test_a_malformed_reply_is_a_parse_error_whose_hint_quotes_the_expected_form(name, text):
    protocol = TEXT_PROTOCOLS[name]
    decision, stored = parse(protocol, text)
    assert decision["kind"] == "unparsable" and stored is None
    assert decision["raw"] == text and decision["error"]
    assert len(decision["error"]) < 600  # what was wrong, quoted short, not the reply again
    ctx = make_context(protocol=name)
    update = validate_args({"decision": unparsable(text[:100], decision["error"]), "parse_retries": 0}, ctx, THREAD)
    assert protocol.expected_format in update["correction"] and decision["error"] in update["correction"]


def test_there_are_thirty_malformed_replies_per_protocol():
    assert len(set(REACT_MALFORMED)) >= 30 and len(set(CALL_TOOL_MALFORMED)) >= 30


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        ("react", "Hello there.", "no 'Action: <tool name>[<argument>]' line and no 'Final Answer: <the answer>'"),
        ("react", "Action: add", "the Action 'add' has no [argument]; write Action: add[<argument>]"),
        ("react", "Action: lookup[capital", "not closed with ']'; write Action: lookup[<argument>]"),
        ("react", "Action: look up[x]", "'look up' is not a tool name; write Action: <tool name>[<argument>]"),
        ("react", 'Action: add[{"a": 1,}]', "the arguments of 'add' are not valid JSON (Expecting property name"),
        ("react", "Final Answer: ", "'Final Answer:' is followed by no answer; write Final Answer: <the answer>"),
        ("call_tool", "Hello there.", "no 'CALL_TOOL(<tool name>, {<arguments>})' and no 'FINAL: <the answer>'"),
        ("call_tool", 'CALL_TOOL(add {"a": 1})', "CALL_TOOL(add is not followed by a comma and the arguments"),
        ("call_tool", "CALL_TOOL(lookup, x", "not closed with ')'; write CALL_TOOL(lookup, <argument>)"),
        ("call_tool", "CALL_TOOL()", "the call names no tool; write CALL_TOOL(<tool name>, <argument>)"),
        ("call_tool", "CALL_TOOL(add, " + NESTED + ")", "nested too deeply"),
        ("call_tool", "x" * 200_000, "the reply is 200000 characters long"),
    ],
)
def test_parse_errors_say_precisely_what_is_wrong(name, text, error):
    decision, _ = parse(TEXT_PROTOCOLS[name], text)
    assert error in decision["error"]


# instructions and the window ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(TEXT_PROTOCOLS.values()), ids=list(TEXT_PROTOCOLS))
def test_instructions_list_the_tools_by_signature_and_show_the_form(protocol):
    text = protocol.instructions(REGISTRY)
    assert "- add(a: integer, b: integer): Add two integers." in text
    assert "- lookup(key: string): Look a key up in a small table." in text
    assert protocol.format_call("<tool name>", "").split("(")[0].split("[")[0] in text
    assert protocol.answer_label in text
    assert protocol.tool_schemas(REGISTRY) == []  # the tools travel in the text, counted with the prompt


def test_react_renders_the_window_as_thought_action_observation():
    call = tool_call("add", ADD, content="adding")
    window = [call, ToolMessage("3", tool_call_id=call.tool_calls[0]["id"]), AIMessage("The sum is 3.")]
    shown = ReactProtocol().render(window)
    assert [type(m) for m in shown] == [AIMessage, HumanMessage, AIMessage]
    assert [m.content for m in shown] == [
        'Thought: adding\nAction: add[{"a": 1, "b": 2}]',
        "Observation: 3",
        "Final Answer: The sum is 3.",
    ]


def test_call_tool_renders_the_window_as_calls_and_observations():
    call = tool_call("add", ADD, content="")
    note = AIMessage("Stopped: dead loop.", name="circuit_break")
    window = [call, ToolMessage("3", tool_call_id=call.tool_calls[0]["id"]), note, AIMessage("3")]
    shown = CallToolProtocol().render(window)
    assert [m.content for m in shown] == [
        'CALL_TOOL(add, {"a": 1, "b": 2})',
        "Observation: 3",
        note.content,
        "FINAL: 3",
    ]


# end to end ------------------------------------------------------------------------------------------------

SCRIPTS = {
    "react": ['Thought: add them\nAction: add[{"a": 1, "b": 2}]', "Thought: done\nFinal Answer: 3"],
    "call_tool": ['I will add.\nCALL_TOOL(add, {"a": 1, "b": 2})', "FINAL: 3"],
}


@pytest.mark.parametrize("name", list(TEXT_PROTOCOLS))
def test_an_agent_calls_a_tool_sees_the_observation_in_its_form_and_answers(name):
    agent, model = make_agent(SCRIPTS[name], protocol=name)
    result = agent.invoke({"task": "1 + 2?"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "3")
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["3"]
    first, second = model.calls
    assert not first.tools and not second.tools  # no native tools: they are in the instructions
    system = first.messages[0]
    assert (
        isinstance(system, SystemMessage) and TEXT_PROTOCOLS[name].instructions(make_context().registry) in system.text
    )
    *_, decision, observation = second.messages
    assert isinstance(decision, AIMessage) and decision.content == TEXT_PROTOCOLS[name].format_decision(
        "add them" if name == "react" else "I will add.", [{"name": "add", "args": ADD}]
    )
    assert isinstance(observation, HumanMessage) and observation.content == "Observation: 3"


@pytest.mark.parametrize(
    ("name", "bad", "good"),
    [
        ("react", "Action: add[1, 2]", "Final Answer: 3"),
        ("call_tool", "CALL_TOOL(add, {'a': 1, 'b': 2})", "FINAL: 3"),
    ],
)
def test_an_unreadable_reply_is_retried_with_the_error_and_the_expected_form(name, bad, good):
    agent, model = make_agent([bad, good], protocol=name)
    result = agent.invoke({"task": "1 + 2?"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "3")
    hint = model.calls[1].messages[-1].content
    expected = parse(TEXT_PROTOCOLS[name], bad)[0]["error"]
    assert bad in hint and expected in hint and TEXT_PROTOCOLS[name].expected_format in hint


def test_a_bare_value_runs_end_to_end_with_the_seeds_capitalised_tool_name():
    agent, _ = make_agent(["Action: Lookup[capital_of_france]", "Final Answer: Paris"], protocol="react")
    result = agent.invoke({"task": "capital of France?"}, THREAD)
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["Paris"]


# one list of names ----------------------------------------------------------------------------------------


def test_the_docs_list_every_protocol_in_the_cli_usage_and_the_protocols_page():
    from tests.test_readme import page

    (usage,) = re.findall(r"\[--protocol ([\w|]+)\]", page("cli.md"))
    assert usage.split("|") == list(PROTOCOLS)
    section = page("protocols.md").split("# Decision protocols", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^- `(\w+)`", section, re.MULTILINE) == list(PROTOCOLS)
