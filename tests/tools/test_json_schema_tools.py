"""Tools described by a JSON schema (every MCP tool): their arguments are checked before they run, and the
model is told what is wrong in the words of the pydantic path."""

import asyncio
import urllib.request

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import ConfigurationError, ToolRegistry, build_agent
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools.json_schema import MAX_PROBLEMS
from tests.conftest import THREAD, add

INTEGERS = {"a": {"type": "integer"}, "b": {"type": "integer"}}
STRICT_ADD = {"type": "object", "properties": INTEGERS, "required": ["a", "b"], "additionalProperties": False}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    "required": ["x"],
    "additionalProperties": False,
}
SHAPES = {
    "type": "object",
    "properties": {
        "unit": {"enum": ["c", "f"]},
        "point": POINT,
        "items": {"type": "array", "items": {"type": "integer"}},
        "label": {"type": ["string", "null"], "maxLength": 5},
        "count": {"type": "integer", "minimum": 1},
        "when": {"type": "string", "format": "date"},
    },
}


def json_tool(schema, func=None, name="add"):
    return StructuredTool(
        name=name, description="Add two integers.", args_schema=schema, func=func or (lambda **kwargs: "ok")
    )


def problems(schema, args):
    found, canonical = ToolRegistry([json_tool(schema)])["add"].validate(args)
    assert canonical == ({} if found else args)
    return found


def test_each_missing_required_argument_is_named_at_its_own_path():
    assert problems(STRICT_ADD, {"a": 1}) == ["b: missing (required)"]
    assert problems(STRICT_ADD, {}) == ["a: missing (required)", "b: missing (required)"]
    assert problems(SHAPES, {"point": {}}) == ["point.x: missing (required)"]


def test_a_wrong_type_says_what_was_expected_and_what_came():
    assert problems(STRICT_ADD, {"a": "two", "b": 2}) == ["a: expected integer (got 'two')"]
    assert problems(STRICT_ADD, {"a": 1, "b": True}) == ["b: expected integer (got True)"]
    assert problems(SHAPES, {"label": 3}) == ["label: expected string or null (got 3)"]


def test_an_enum_lists_its_values():
    assert problems(SHAPES, {"unit": "k"}) == ["unit: expected one of 'c', 'f' (got 'k')"]


def test_nested_objects_and_array_items_are_named_by_their_path():
    found = problems(SHAPES, {"point": {"x": "one", "z": 0}, "items": [1, 2, "three", 4.5]})
    assert found == [
        "items.2: expected integer (got 'three')",
        "items.3: expected integer (got 4.5)",
        "point.x: expected number (got 'one')",
        "point.z: unexpected argument (expected one of ['x', 'y'])",
    ]


def test_unknown_arguments_are_refused_only_when_the_schema_says_additional_properties_false():
    assert problems(STRICT_ADD, {"a": 1, "b": 2, "zzz": 1}) == ["zzz: unexpected argument (expected one of ['a', 'b'])"]
    open_add = {"type": "object", "properties": INTEGERS, "required": ["a", "b"]}
    assert problems(open_add, {"a": 1, "b": 2, "zzz": 1}) == []
    assert problems(open_add, {"a": 1, "zzz": 1}) == ["b: missing (required)"]


def test_problems_come_sorted_by_path_and_other_keywords_keep_jsonschemas_message():
    found = problems(STRICT_ADD, {"zzz": 1, "b": "2", "a": None})
    assert found == [
        "a: expected integer (got None)",
        "b: expected integer (got '2')",
        "zzz: unexpected argument (expected one of ['a', 'b'])",
    ]
    assert problems(SHAPES, {"count": 0}) == ["count: 0 is less than the minimum of 1"]
    # the root's problems are the arguments'
    assert problems({"type": "object", "minProperties": 1}, {}) == ["arguments: {} should be non-empty"]


def test_formats_are_not_checked():
    assert problems(SHAPES, {"when": "not a date", "count": "many"}) == ["count: expected integer (got 'many')"]


def test_huge_values_and_many_problems_are_cut():
    (wrong_type,) = problems(STRICT_ADD, {"a": "x" * 10_000, "b": 2})
    assert wrong_type.startswith("a: expected integer (got 'xxx") and "more characters cut]" in wrong_type
    assert len(wrong_type) < 200
    (too_long,) = problems(SHAPES, {"label": "y" * 10_000})
    assert too_long.startswith("label: 'yyy") and too_long.endswith("more characters cut] is too long")
    found = problems(SHAPES, {"items": [str(number) for number in range(1000)]})
    assert found[:2] == ["items.0: expected integer (got '0')", "items.1: expected integer (got '1')"]
    assert len(found) == MAX_PROBLEMS + 1 and found[-1] == f"and {1000 - MAX_PROBLEMS} more problems"


def test_a_valid_call_passes_unchanged_through_the_validator_built_at_registration():
    entry = ToolRegistry([json_tool(STRICT_ADD)])["add"]
    assert entry.json_validator is not None and entry.schema is None
    args = {"a": 1.0, "b": 2}  # 1.0 is an integer in JSON schema, and stays as the model wrote it
    assert entry.validate(args) == ([], args)
    assert entry.validate({"a": 1, "b": "2"})[0] == ["b: expected integer (got '2')"]
    # a tool with a pydantic schema keeps pydantic's validation
    assert ToolRegistry([add])["add"].json_validator is None


def test_the_draft_named_by_schema_decides_how_the_schema_is_read():
    tuple_items = {"type": "object", "properties": {"pair": {"type": "array", "items": [{"type": "integer"}]}}}
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **tuple_items}
    assert problems(draft7, {"pair": ["one"]}) == ["pair.0: expected integer (got 'one')"]
    with pytest.raises(ConfigurationError, match=r"tool 'add' has an invalid JSON schema .*\$\.properties\.pair"):
        ToolRegistry([json_tool(tuple_items)])  # an array of schemas is no `items` in 2020-12


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "integr"}}},
            r"tool 'add' has an invalid JSON schema for its arguments, at \$\.properties\.a\.type: ",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(unclosed"}}},
            r"tool 'add' has an invalid JSON schema .* is not a 'regex'",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
            r"tool 'add' has a JSON schema .* \$ref '#/\$defs/Missing' cannot be resolved",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            r"\$ref 'https://example.com/a.json' cannot be resolved .* never fetches",
        ),
    ],
    ids=["unknown-type", "bad-pattern", "dangling-ref", "remote-ref"],
)
def test_a_broken_schema_is_refused_at_registration_without_fetching_anything(schema, message, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the schema was fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(ConfigurationError, match=message):
        ToolRegistry([json_tool(schema)])


def test_references_within_the_schema_are_followed():
    schema = {
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/Point"}},
        "$defs": {"Point": POINT},
    }
    assert problems(schema, {"start": {"x": 1, "y": "up"}}) == ["start.y: expected number (got 'up')"]


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_an_agent_feeds_back_invalid_arguments_of_a_json_schema_tool_without_running_it(how):
    ran = []

    def record(**kwargs):
        ran.append(kwargs)
        return "ran"

    model = ScriptedChatModel(replies=[tool_call("add", {"a": "two", "zzz": 1}), "I cannot add those."])
    agent = build_agent(model, [json_tool(STRICT_ADD, record)], checkpointer=InMemorySaver())
    payload = {"task": "Add two and three."}
    result = agent.invoke(payload, THREAD) if how == "invoke" else asyncio.run(agent.ainvoke(payload, THREAD))

    assert ran == []
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error"
    assert message.content == (
        "Error: invalid arguments for 'add': a: expected integer (got 'two'); b: missing (required); "
        "zzz: unexpected argument (expected one of ['a', 'b']). Expected add(a: integer, b: integer)."
    )
    assert model.calls[1].messages[-1].content == message.content  # the model's next prompt holds it
    assert result["final_answer"] == "I cannot add those."
