"""The seed presets: each seed's numbers, its loop run end to end, and `reinloop run --preset`."""

import re

import pytest
from langchain_core.messages import ToolMessage

import reinloop
from reinloop import AgentConfig, ConfigurationError, build_agent
from reinloop.presets import PRESETS, preset, seed_000, seed_002, seed_003, seed_004
from reinloop.testing import ScriptedChatModel, json_action, tool_call
from tests.conftest import THREAD, add, explode
from tests.openai_server import ScriptedOpenAIServer

PROTOCOLS = {"seed-000": "tool_calling", "seed-002": "react", "seed-003": "json", "seed-004": "call_tool"}

# The numbers each seed article gives, as AgentConfig fields (the presets' docstrings quote the seeds).
SEED_NUMBERS = {
    "seed-000": {
        "max_iterations": 20,  # MAX_ITERATIONS = 20
        "error_threshold": 3,  # ERROR_THRESHOLD = 3, breaks at once
        "error_reflection": False,
        "max_replans": 0,
        "max_parse_retries": 1,  # a JSON parse error is retried once
        "memory_capacity": 10,  # ShortTermMemory(capacity=10)
        "compress_every": 5,  # every 5 short-term entries become one summary
        "recall_k": 2,  # similarity_search top-2
        "tool_attempts": 1,  # tool errors go back to the model
        "loop_window": 1,  # no dead-loop rule but the error breaker
    },
    "seed-002": {
        "max_iterations": 6,  # MAX_ITER = 6
        "memory_capacity": 5,  # ConversationBufferWindowMemory(k=5)
        "max_parse_retries": 0,  # "format error, reply again", then the next iteration
        "tool_attempts": 1,
        "error_threshold": 7,  # no error breaker: above the six rounds
        "error_reflection": False,
        "max_replans": 0,
        "recall_k": 0,
        "loop_window": 1,
    },
    "seed-003": {
        "max_iterations": 5,  # AgentLoop(max_iterations=5)
        "memory_capacity": 6,  # CircularMemory(capacity=6)
        "observation_max_chars": 500,  # observation[:500]
        "thought_max_chars": 300,  # thought[-300:]
        "compress_every": 3,  # compressed every 3 rounds
        "max_parse_retries": 0,
        "tool_attempts": 1,
        "error_threshold": 6,
        "error_reflection": False,
        "max_replans": 0,
        "recall_k": 0,
        "loop_window": 1,
    },
    "seed-004": {
        "max_iterations": 10,  # max_iters=10
        "memory_capacity": 15,  # deque(maxlen=30) messages, two a round
        "context_token_budget": 6_000,  # memory decay past 6000
        "loop_key": "tool",  # the same tool more than twice in three rounds
        "loop_window": 3,
        "max_repeats": 2,
        "repeats_after_feedback": 0,  # the seed stops at once
        "repeats_after_cache": 0,
        "max_parse_retries": 0,
        "tool_attempts": 1,
        "error_threshold": 11,
        "error_reflection": False,
        "max_replans": 0,
        "recall_k": 0,
    },
}


def test_the_registry_holds_the_four_seeds_in_order():
    assert list(PRESETS) == ["seed-000", "seed-002", "seed-003", "seed-004"]
    assert [PRESETS[name] for name in PRESETS] == [seed_000, seed_002, seed_003, seed_004]
    assert reinloop.PRESETS is PRESETS and reinloop.preset is preset
    assert {"PRESETS", "preset"} <= set(reinloop.__all__)


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_is_a_config_in_its_seeds_protocol(name):
    config = PRESETS[name]()
    assert isinstance(config, AgentConfig)
    assert config.protocol == PROTOCOLS[name]
    assert "protocol" in config.model_fields_set  # named, not the default that happens to match
    assert AgentConfig(**config.model_dump()) == config  # valid as a whole


@pytest.mark.parametrize("name", list(SEED_NUMBERS))
def test_each_preset_sets_its_seeds_numbers_and_keeps_the_other_defaults(name):
    config, numbers = PRESETS[name](), SEED_NUMBERS[name]
    assert {field: getattr(config, field) for field in numbers} == numbers
    assert config.model_fields_set == {*numbers, "protocol"}  # nothing set beyond what the seed says
    defaults = AgentConfig()
    for field in set(AgentConfig.model_fields) - config.model_fields_set:
        assert getattr(config, field) == getattr(defaults, field), field


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_docstring_names_every_field_its_preset_sets(name):
    make = PRESETS[name]
    for field in make().model_fields_set:
        assert field in (make.__doc__ or ""), f"{make.__name__} sets {field} without saying why"


@pytest.mark.parametrize("spelling", ["seed-002", "seed_002", "SEED-002", " Seed_002 "])
def test_preset_accepts_dashes_or_underscores(spelling):
    assert preset(spelling) == seed_002()


@pytest.mark.parametrize("name", ["seed-001", "seed", "", "react"])
def test_an_unknown_preset_names_the_valid_ones(name):
    with pytest.raises(ConfigurationError) as raised:
        preset(name)
    assert f"unknown preset {name!r}" in str(raised.value)
    assert "seed-000, seed-002, seed-003, seed-004" in str(raised.value)


# each preset's loop, run end to end ------------------------------------------------------------------------

# A calculation and the answer, in each preset's protocol.
SCRIPTS = {
    "seed-000": [tool_call("add", {"a": 2, "b": 3}), "5"],
    "seed-002": ['Thought: add them\nAction: add[{"a": 2, "b": 3}]', "Final Answer: 5"],
    "seed-003": [json_action("add", {"a": 2, "b": 3}, thought="add them"), json_action("final_answer", "5")],
    "seed-004": ['CALL_TOOL(add, {"a": 2, "b": 3})', "FINAL: 5"],
}


def run(name, replies, tools=(add, explode)):
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(model, list(tools), config=preset(name))
    return agent.invoke({"task": "What is 2 + 3?"}, THREAD), model


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_runs_a_task_in_its_protocol(name):
    result, model = run(name, SCRIPTS[name])
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("answered", "5", 2)
    assert [m.text for m in result["messages"] if isinstance(m, ToolMessage)] == ["5"]
    bound = [len(call.tools) for call in model.calls]
    assert bound == ([2, 2] if name == "seed-000" else [0, 0])  # native tools for tool_calling only


def test_seed_004_stops_the_third_identical_call_of_a_tool_in_three_rounds():
    result, model = run("seed-004", ['CALL_TOOL(add, {"a": 1, "b": 1})'] * 3)
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("dead_loop", 3, 3)
    assert [check["error_kind"] for check in result["checks"]] == ["repeat_after_feedback"]
    refusal = [m.text for m in result["messages"] if isinstance(m, ToolMessage)][-1]
    assert refusal.startswith("Error: not run. Calls of 'add' were already answered from cache 1 times")


def test_seed_004_counts_calls_of_one_tool_whatever_the_arguments():
    replies = [f'CALL_TOOL(add, {{"a": {n}, "b": 1}})' for n in range(4)]
    result, model = run("seed-004", replies)
    assert (result["finish_reason"], result["iteration"]) == ("dead_loop", 4)
    sent = [m.text for call in model.calls for m in call.messages]  # the observations, as the protocol writes them
    assert any("Error: not run: 'add' was called 3 times in 3 decisions" in text for text in sent)
    final = result["messages"][-1].text  # the breaker's message says what it counted, and names the call
    assert final.startswith("Stopped: a dead loop. Calls of the same tool kept coming") and 'add({"a": 3' in final

    # reinloop's defaults count identical calls only: the same four calls all run.
    model = ScriptedChatModel(replies=[*replies, "FINAL: done"])
    agent = build_agent(model, [add], config=AgentConfig(protocol="call_tool"))
    assert agent.invoke({"task": "Count."}, THREAD)["finish_reason"] == "answered"


def test_seed_002_goes_on_after_every_error_until_its_six_iterations():
    # An unreadable reply costs a round, with no retry, and gets the seed's "format error" note; it is the
    # model's own mistake, no error of reinloop's streak, so max_iterations ends the loop, as MAX_ITER does.
    result, model = run("seed-002", ["I am not sure."] * 6)
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("max_iterations", 6, 6)
    notes = [call.messages[-1].text for call in model.calls[1:]]
    assert len(notes) == 5 and all(note.startswith("Error: your reply could not be read") for note in notes)
    assert result["consecutive_errors"] == 0
    # A tool error counts, one a round at most, but never reaches error_threshold 7 within the six rounds.
    result, model = run("seed-002", [f'Action: explode[{{"reason": "{n}"}}]' for n in range(6)])
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("max_iterations", 6, 6)
    assert result["consecutive_errors"] == 6


def test_seed_003_goes_on_after_tool_errors_until_its_five_iterations():
    replies = [json_action("explode", {"reason": str(n)}) for n in range(5)]
    result, model = run("seed-003", replies)
    # With one tool run a round (tool_attempts=1), the default tool-run budget runs out with the rounds: the
    # rounds ended the run, as the seed's MAX_ITER does.
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("max_iterations", 5, 5)
    failures = result["streak_errors"]
    assert len(failures) == 5 and not any("attempts" in text for text in failures)  # each ran once


def test_seed_000_breaks_at_three_errors_in_a_row_without_a_reflection_turn_or_tool_retries():
    replies = [tool_call("explode", {"reason": str(n)}) for n in range(3)]
    result, model = run("seed-000", replies)
    assert (result["finish_reason"], result["iteration"], len(model.calls)) == ("error_streak", 3, 3)
    assert result.get("reflection") is None
    failures = result["streak_errors"]
    assert len(failures) == 3 and not any("attempts" in text for text in failures)  # each ran once


# reinloop run --preset -----------------------------------------------------------------------------------


@pytest.fixture
def server():
    with ScriptedOpenAIServer() as running:
        yield running


def cli(server, tmp_path, *args):
    from reinloop.cli import main

    common = ["--base-url", server.base_url, "--no-memory", "--db", str(tmp_path / "runs.sqlite")]
    if args[0] == "run":
        common += ["--workspace", str(tmp_path / "ws")]
    return main([*args, *common])


def calls_of_calculator(count):
    return [f'CALL_TOOL(calculator, {{"expression": "{n} + 1"}})' for n in range(count)]


def test_run_with_a_preset_uses_its_protocol_and_its_dead_loop_rule(server, tmp_path, capsys):
    server.replies = calls_of_calculator(6)
    code = cli(server, tmp_path, "run", "Count.", "--preset", "seed-004", "--thread", "t")
    assert code == 5, capsys.readouterr().err  # dead_loop: the fourth call of calculator in a row
    assert len(server.requests) == 4
    first = server.requests[0]
    assert "tools" not in first  # call_tool is a text protocol: no native tools
    assert "CALL_TOOL(" in first["messages"][0]["content"]


def test_options_given_override_the_preset(server, tmp_path, capsys):
    # seed-004's own limits would let these errors go on for ten rounds; --error-threshold 2 stops them at the
    # second, and the preset's error_reflection=False gives no reflection turn first.
    server.replies = [f'CALL_TOOL(calculator, {{"expression": "{n} / 0"}})' for n in range(4)]
    code = cli(server, tmp_path, "run", "Divide.", "--preset", "seed_004", "--error-threshold", "2")
    assert code == 4, capsys.readouterr().err  # error_streak
    assert len(server.requests) == 2

    # No parse retry (the preset's), and two rounds (the option's): two requests, then max_iterations.
    server.replies, sent = ["Let me think.", "Still thinking."], len(server.requests)
    code = cli(server, tmp_path, "run", "Think.", "--preset", "seed-004", "--max-iterations", "2")
    assert code == 3, capsys.readouterr().err
    assert len(server.requests) == sent + 2


def test_the_preset_protocol_is_overridden_by_protocol(server, tmp_path, capsys):
    server.replies = [{"tool": "calculator", "args": {"expression": "2 + 3"}}, "5"]
    code = cli(server, tmp_path, "run", "2 + 3?", "--preset", "seed-004", "--protocol", "tool_calling")
    assert code == 0, capsys.readouterr().err
    assert server.requests[0]["tools"]  # native tool calls, as --protocol says


def test_resume_keeps_the_runs_preset_and_a_new_preset_brings_its_protocol(server, tmp_path, capsys):
    server.replies = ["Let me think."]
    assert cli(server, tmp_path, "run", "Count.", "--preset", "seed-004", "--max-iterations", "1", "--thread", "t") == 3

    # seed-004 has no parse retry: one unreadable reply is one request and the round is over.
    server.replies, sent = ["not a decision"], len(server.requests)
    assert cli(server, tmp_path, "resume", "t", "--extra-iterations", "1") == 3
    assert len(server.requests) == sent + 1

    server.replies = ["Final Answer: 1"]  # seed-002 speaks react
    assert cli(server, tmp_path, "resume", "t", "--extra-iterations", "1", "--preset", "seed-002") == 0
    system = server.requests[-1]["messages"][0]["content"]
    assert "Final Answer:" in system and "CALL_TOOL(" not in system


def test_preset_choices_come_from_the_registry(capsys):
    from reinloop.cli import main

    with pytest.raises(SystemExit) as shown:
        main(["run", "--help"])
    assert shown.value.code == 0
    assert "{" + ",".join(PRESETS) + "}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["run", "x", "--preset", "seed-001"])
    assert refused.value.code == 2
    assert "invalid choice: 'seed-001'" in capsys.readouterr().err


def test_the_config_a_run_builds_is_the_preset_with_the_options_given(monkeypatch, server, tmp_path):
    import reinloop.graph

    built: list[AgentConfig] = []
    real_build = reinloop.graph.build_agent

    def spy(*args, config, **kwargs):
        built.append(config)
        return real_build(*args, config=config, **kwargs)

    monkeypatch.setattr(reinloop, "build_agent", spy)
    server.replies = ["FINAL: 1"]
    assert cli(server, tmp_path, "run", "One.", "--preset", "seed-004", "--error-threshold", "2") == 0
    assert built[0] == AgentConfig(**{**seed_004().model_dump(), "error_threshold": 2})


def test_the_docs_list_every_preset_in_the_cli_usage_and_the_presets_table():
    from tests.test_readme import page

    (usage,) = re.findall(r"\[--preset (seed-[\w|-]+)\]", page("cli.md"))
    assert usage.split("|") == list(PRESETS)
    section = page("presets.md").split("# Presets", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \| `(\w+)` \|", section, re.MULTILINE)
    assert rows == list(PROTOCOLS.items())
