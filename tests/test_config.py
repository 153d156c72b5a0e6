import pytest

from reinloop import AgentConfig, ConfigurationError


def test_defaults_match_the_seeds():
    config = AgentConfig()
    assert (config.max_iterations, config.error_threshold, config.max_parse_retries) == (20, 3, 1)
    assert (config.loop_window, config.max_repeats, config.tool_timeout_s) == (3, 2, 30.0)
    assert config.protocol == "tool_calling"
    assert config.system_prompt


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
