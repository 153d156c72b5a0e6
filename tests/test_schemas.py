"""The agent's input, output and state JSON schemas, as LangGraph Server and Studio read them, work on the
Python the project supports (pydantic refuses `typing.TypedDict` below 3.12)."""

import ast
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from reinloop import FINISH_REASONS, build_agent
from reinloop.testing import ScriptedChatModel
from tests.conftest import add

PACKAGE = Path(__file__).resolve().parent.parent / "reinloop"
# Pydantic needs `typing_extensions.TypedDict` below Python 3.12 to turn a TypedDict into a schema (it takes
# `typing.NotRequired` and its kin inside one).
TYPED_DICT = "TypedDict"


@pytest.fixture(scope="module")
def agent():
    return build_agent(ScriptedChatModel(replies=["done"]), [add])


def test_the_input_schema_asks_for_the_task_as_a_string(agent):
    schema = agent.get_input_jsonschema()
    assert schema["required"] == ["task"]
    assert schema["properties"]["task"]["type"] == "string"


def test_the_output_schema_has_the_finish_and_nothing_that_is_not_returned(agent):
    properties = agent.get_output_jsonschema()["properties"]
    assert properties["final_answer"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert properties["finish_reason"]["anyOf"][0]["enum"] == list(FINISH_REASONS)
    assert {"task", "messages", "iteration", "usage"} <= set(properties)
    assert "remaining_steps" not in properties  # LangGraph's managed value: never in the output
    output = agent.invoke({"task": "t"})
    assert set(output) <= set(properties)
    call_check = agent.get_output_jsonschema()["$defs"]["CallCheck"]
    assert "cached" in call_check["properties"] and "cached" not in call_check["required"]


def test_the_state_schemas_turn_into_json_schemas(agent):
    for schema in agent.builder.schemas:
        assert TypeAdapter(schema).json_schema()["properties"]
    for node in agent.builder.nodes.values():
        assert TypeAdapter(node.input_schema).json_schema()["properties"]
    assert "check_finish" in agent.get_graph().nodes


def test_no_module_takes_typeddict_from_typing():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "typing":
                offenders += [f"{path.name}: from typing import {a.name}" for a in node.names if a.name == TYPED_DICT]
            if isinstance(node, ast.Attribute) and node.attr == TYPED_DICT and isinstance(node.value, ast.Name):
                offenders += [f"{path.name}: typing.TypedDict"] if node.value.id == "typing" else []
    assert offenders == []
    assert len(list(PACKAGE.rglob("*.py"))) > 20  # the walk found the package
