import threading
from typing import Annotated, Literal

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolArg, tool
from pydantic import BaseModel

from reinloop import ConfigurationError, ToolRegistry
from reinloop.tools import ToolTimeoutError, call_with_timeout, reject_empty, to_observation
from tests.conftest import add


@pytest.mark.parametrize(
    ("value", "empty"),
    [
        (None, True),
        ("", True),
        ("  \n", True),
        ("null", True),
        ("[]", True),
        ("N/A", True),
        ([], True),
        ({}, True),
        (ToolMessage("", tool_call_id="x"), True),
        ("0", False),
        (0, False),
        (False, False),
        ("no results for 'x'", False),
        ([0], False),
    ],
    ids=[
        "none",
        "empty",
        "blank",
        "null-text",
        "empty-list-text",
        "n/a",
        "empty-list",
        "empty-dict",
        "empty-tool-message",
        "zero-text",
        "zero",
        "false",
        "sentence",
        "list",
    ],
)
def test_reject_empty(value, empty):
    assert (reject_empty(value) is not None) == empty


@pytest.mark.parametrize(
    ("value", "text"),
    [("x", "x"), (None, ""), (3, "3"), ({"é": [1, 2]}, '{"é":[1,2]}'), (ToolMessage("m", tool_call_id="1"), "m")],
    ids=["text", "none", "number", "json", "tool-message"],
)
def test_to_observation(value, text):
    assert to_observation(value) == text


def test_call_with_timeout_returns_raises_and_abandons():
    assert call_with_timeout(lambda: 42, 5) == 42
    with pytest.raises(KeyError):
        call_with_timeout(lambda: {}["missing"], 5)
    release = threading.Event()
    try:
        with pytest.raises(ToolTimeoutError, match=r"0\.1 s"):
            call_with_timeout(lambda: release.wait(30), 0.1)
    finally:
        release.set()


def test_registry_lookup_schemas_and_per_tool_settings():
    registry = ToolRegistry([add])
    registry.add(lambda_free_tool, timeout_s=2.5)
    assert registry.names == ["add", "echo"]
    assert "add" in registry and "nope" not in registry and registry.get("nope") is None
    assert registry["echo"].timeout_s == 2.5
    assert registry["add"].schema_json["required"] == ["a", "b"]


class _Item(BaseModel):
    sku: str


@tool
def order(items: list[_Item], mode: Literal["fast", "cheap"], note: str | None = None, count: int = 1) -> str:
    """Place an order."""
    return "ok"


def test_a_signature_shows_each_argument_its_type_and_whether_it_is_optional_in_one_line():
    registry = ToolRegistry([add, order])
    assert registry["add"].signature == "add(a: integer, b: integer)"
    assert (
        registry["order"].signature
        == 'order(items: list[_Item], mode: "fast"|"cheap", note?: string|null, count?: integer)'
    )


def test_injected_arguments_are_not_shown_to_or_validated_for_the_model():
    @tool
    def scoped(query: str, user_id: Annotated[str, InjectedToolArg]) -> str:
        """Search within the user's data."""
        return query

    entry = ToolRegistry([scoped])["scoped"]
    assert list(entry.schema_json["properties"]) == ["query"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_s": 0}, "timeout_s for tool 'echo' must be positive"),
        ({"cacheable": "no"}, "cacheable for tool 'echo' must be True or False"),
    ],
    ids=["zero-timeout", "cacheable-not-bool"],
)
def test_registry_rejects_bad_settings(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        ToolRegistry().add(lambda_free_tool, **kwargs)


def test_reserved_names_are_refused():
    @tool
    def final_answer(text: str) -> str:
        """Pretend to be the protocol's final answer."""
        return text

    with pytest.raises(ConfigurationError, match="reserved"):
        ToolRegistry([final_answer])


@tool
def lambda_free_tool(text: str) -> str:
    """Echo the text."""
    return text


lambda_free_tool.name = "echo"


def test_a_tool_declares_itself_not_cacheable_and_add_overrides_it():
    @tool
    def clock() -> str:
        """The time."""
        return "noon"

    clock.metadata = {"reinloop": {"cacheable": False}}
    reg = ToolRegistry([clock, add])
    assert (reg["clock"].cacheable, reg["add"].cacheable) == (False, True)
    reg = ToolRegistry()
    reg.add(clock, cacheable=True)
    reg.add(add, cacheable=False)
    assert (reg["clock"].cacheable, reg["add"].cacheable) == (True, False)


def test_the_toolsets_time_and_state_readers_are_not_cacheable(tmp_path):
    from reinloop import default_toolset
    from reinloop.tools.weather import WeatherTool

    reg = ToolRegistry([*default_toolset(tmp_path), WeatherTool(base_url="http://127.0.0.1:9")])
    assert sorted(entry.name for entry in reg if not entry.cacheable) == [
        "current_time",
        "db_query",
        "file_read",
        "timer",
        "weather",
    ]
