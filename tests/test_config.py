import threading

import pytest
from langchain_core.messages import ToolMessage

from reinloop import AgentConfig, ConfigurationError, ReinloopError, build_agent
from reinloop.cli import USAGE_ERROR, main
from reinloop.config import MAX_BACKOFF_S
from reinloop.nodes import decide
from reinloop.nodes.decide import build_prompt
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools.database import Database
from reinloop.tools.execution import MAX_TIMEOUT_S
from reinloop.tools.search import LocalCorpusSearch
from tests.conftest import add, make_context, new_thread
from tests.openai_server import ScriptedOpenAIServer


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
        ({"max_iterations": 10**26}, "max_iterations: Input should be less than or equal to 1000000"),
        ({"error_threshold": -1}, "error_threshold"),
        ({"tool_timeout_s": 0}, "tool_timeout_s"),
        ({"protocol": "xml"}, "protocol"),
        ({"max_parse_retries": -1}, "max_parse_retries"),
        ({"system_prompt": ""}, "system_prompt"),
        ({"max_iteration": 5}, "max_iteration"),
    ],
    ids=[
        "zero-iterations",
        "iterations-past-the-limit",
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


# Each wait setting with the most it may be: a tool call's timeout is waited for with thread locks, a backoff
# with time.sleep.
WAITS = {
    "tool_timeout_s": MAX_TIMEOUT_S,
    "tool_backoff_s": MAX_BACKOFF_S,
    "tool_backoff_max_s": MAX_BACKOFF_S,
    "model_retry_backoff_s": MAX_BACKOFF_S,
}
# Longer than any platform wait: each was accepted, and then raised OverflowError out of invoke at the first
# wait (the model's retry backoff aside: LangGraph cut each of its waits to 128 s).
TOO_LONG = [float("inf"), 1e10, threading.TIMEOUT_MAX]


@pytest.mark.parametrize("field", WAITS)
@pytest.mark.parametrize("seconds", TOO_LONG, ids=["inf", "1e10", "timeout-max"])
def test_a_wait_longer_than_the_platform_can_make_is_a_configuration_error_that_says_the_maximum(field, seconds):
    most = f"{WAITS[field]:.0f}"
    with pytest.raises(ConfigurationError, match=rf"{field}: must be a finite number of seconds, at most {most} "):
        AgentConfig(**{field: seconds})


@pytest.mark.parametrize("field", WAITS)
def test_a_nan_wait_is_a_configuration_error(field):
    with pytest.raises(ConfigurationError, match=rf"{field}: .*\(got nan\)"):
        AgentConfig(**{field: float("nan")})


@pytest.mark.parametrize("field", WAITS)
def test_the_longest_wait_a_setting_may_have_is_accepted(field):
    assert getattr(AgentConfig(**{field: WAITS[field]}), field) == WAITS[field]


def test_the_longest_tool_timeout_runs_a_call_that_an_infinite_one_crashed():
    model = ScriptedChatModel(replies=[tool_call("add", {"a": 2, "b": 3}), "5"])
    agent = build_agent(model, [add], config=AgentConfig(tool_timeout_s=MAX_TIMEOUT_S))
    result = agent.invoke({"task": "add"}, new_thread())
    assert (result["finish_reason"], result["messages"][-2].content) == ("answered", "5")


def test_the_cli_reports_an_infinite_tool_timeout_on_one_line_with_exit_code_2(tmp_path, capsys):
    options = ["--no-memory", "--workspace", str(tmp_path / "ws"), "--db", str(tmp_path / "runs.sqlite")]
    with ScriptedOpenAIServer() as server:
        code = main(["run", "Add 2 and 3.", "--base-url", server.base_url, *options, "--tool-timeout", "inf"])
    error = capsys.readouterr().err
    assert code == USAGE_ERROR and error.count("\n") == 1, error
    assert error.startswith("error: invalid AgentConfig: tool_timeout_s: must be a finite number of seconds")
    assert f"at most {MAX_TIMEOUT_S:.0f}" in error and error.rstrip().endswith("(got inf)")
    assert not server.requests  # refused before the model was asked anything


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
