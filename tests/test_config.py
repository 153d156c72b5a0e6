import pytest
from langchain_core.messages import ToolMessage

from reinloop import AgentConfig, ConfigurationError, ReinloopError
from reinloop.nodes import decide
from reinloop.nodes.decide import build_prompt
from reinloop.tools.database import Database
from reinloop.tools.search import LocalCorpusSearch
from tests.conftest import make_context


def test_defaults_match_the_seeds():
    config = AgentConfig()
    assert (config.max_iterations, config.error_threshold, config.max_parse_retries) == (20, 3, 1)
    assert (config.loop_window, config.max_repeats, config.tool_timeout_s) == (3, 2, 30.0)
    assert config.protocol == "tool_calling"
    assert config.system_prompt is None  # no system message unless asked for (or a text protocol's format)


@pytest.mark.parametrize(
    ("values", "mentions"),
    [
        ({"max_iterations": 0}, "max_iterations"),
        ({"error_threshold": -1}, "error_threshold"),
        ({"tool_timeout_s": 0}, "tool_timeout_s"),
        ({"protocol": "xml"}, "protocol"),
        ({"max_parse_retries": -1}, "max_parse_retries"),
        ({"system_prompt": ""}, "system_prompt"),
        ({"max_iteration": 5}, "max_iteration"),
    ],
    ids=[
        "zero-iterations",
        "negative-threshold",
        "zero-timeout",
        "unknown-protocol",
        "negative-retries",
        "empty-prompt",
        "misspelled-field",
    ],
)
def test_invalid_values_are_rejected_with_the_field_named(values, mentions):
    with pytest.raises(ConfigurationError, match=mentions) as info:
        AgentConfig(**values)
    assert isinstance(info.value, ValueError)


def test_config_is_frozen():
    config = AgentConfig()
    with pytest.raises(Exception, match="frozen"):
        config.max_iterations = 3


def _blank_task():
    decide({"task": " "}, make_context(), {})


def _broken_window():
    build_prompt({"task": "t", "messages": [ToolMessage("4", tool_call_id="c1")]}, make_context())


@pytest.mark.parametrize(
    ("raising", "kind"),
    [
        (lambda path: Database(path / "d.sqlite", {}), ValueError),
        (lambda path: LocalCorpusSearch(path / "none"), ValueError),
        (lambda path: _blank_task(), ValueError),
        (lambda path: _broken_window(), RuntimeError),
    ],
    ids=["database-tables", "search-folder", "blank-task", "broken-window"],
)
def test_library_errors_derive_from_reinloop_error_and_keep_their_builtin_base(raising, kind, tmp_path):
    with pytest.raises(ReinloopError) as info:
        raising(tmp_path)
    assert isinstance(info.value, kind)  # callers that catch the built-in class keep working
