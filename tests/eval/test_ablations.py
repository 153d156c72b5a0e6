"""reinloop's ablations: each runs without its guard (or its parse retries) and behaves so, they are rows of
every report and grid, and each is paired with full reinloop in success and in tokens."""

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

import reinloop
from reinloop.guards import DEFAULT_GUARDS
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from reinloop_eval import AGENTS, BUDGET, SUITE, FaultProfile, evaluate_suite, write_report
from reinloop_eval.agents import ABLATED_GUARDS, ABLATIONS, REINLOOP_AGENTS, _runners

TASK = SUITE[0]


def test_every_guard_that_acts_during_a_run_has_an_ablation_row_and_all_of_them_one_more():
    assert set(ABLATED_GUARDS) == {"dead_loop", "error_streak", "tool_circuit", "max_tool_attempts"}
    assert list(ABLATIONS) == [
        "reinloop -dead_loop", "reinloop -error_streak", "reinloop -tool_circuit", "reinloop -max_tool_attempts",
        "reinloop -all guards", "reinloop -parse retries",
    ]  # fmt: skip
    assert set(REINLOOP_AGENTS) <= set(AGENTS)


@pytest.mark.parametrize("agent", list(ABLATIONS))
def test_an_ablation_builds_reinloop_without_its_guards_and_with_the_same_iteration_budget(agent, monkeypatch):
    built = []  # (the compiled agent, its AgentConfig) of each build

    def spy(*args, **kwargs):
        built.append((build_agent(*args, **kwargs), kwargs["config"]))
        return built[-1][0]

    build_agent = reinloop.build_agent
    monkeypatch.setattr(reinloop, "build_agent", spy)
    model = ScriptedChatModel(replies=[AIMessage(TASK.answer)])
    _runners(FaultProfile())[agent](model, [], TASK, {})
    (compiled, config), (settings, without) = built[0], ABLATIONS[agent]
    names = [guard.name for guard in compiled.guards]
    assert names == [guard.name for guard in DEFAULT_GUARDS if guard.name not in without]
    assert {"max_iterations", "step_limit", "middleware"} <= set(names)
    assert config.max_iterations == BUDGET
    assert config.max_parse_retries == settings.get("max_parse_retries", 1)


def counted_tool(fails):
    runs = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        runs.append(key)
        if fails:
            raise ConnectionError("backend down")
        return f"the value of {key}"

    return lookup, runs


def same_call(messages):
    return tool_call("lookup", {"key": "a"})


def new_call(messages):
    return tool_call("lookup", {"key": f"k{len(messages)}"})


def five_new_calls(messages):
    return parallel_calls([("lookup", {"key": f"k{len(messages)}-{n}"}) for n in range(5)])


def run(agent, respond, fails):
    lookup, runs = counted_tool(fails)
    model = ScriptedChatModel(respond=respond, max_calls=200)
    outcome = _runners(FaultProfile())[agent](model, [lookup], TASK, {})
    return outcome.finish, len(runs)


# (ablation, the model's script, whether the tool fails): full reinloop's finish and tool runs, the ablation's.
# max_tool_attempts: 3 per round of the 20-round budget (60), where five new calls a round make 100.
CASES = [
    ("reinloop -dead_loop", same_call, False, ("dead_loop", 1), ("max_iterations", BUDGET)),
    # nothing else ends a run of failing calls before the iteration budget (the open circuit keeps the tool runs few)
    ("reinloop -error_streak", new_call, True, ("error_streak", 3), ("max_iterations", 5)),
    ("reinloop -max_tool_attempts", five_new_calls, False, ("max_tool_attempts", 60), ("max_iterations", 100)),
    ("reinloop -all guards", same_call, False, ("dead_loop", 1), ("max_iterations", BUDGET)),
    ("reinloop -all guards", new_call, True, ("error_streak", 3), ("max_iterations", BUDGET)),
]  # fmt: skip


@pytest.mark.parametrize(
    "agent, respond, fails, full, ablated",
    CASES,
    ids=["dead_loop", "error_streak", "max_tool_attempts", "all-guards-repeats", "all-guards-errors"],
)
def test_an_ablation_lets_the_run_go_on_where_full_reinloop_stops(agent, respond, fails, full, ablated):
    for name, expected in (("reinloop", full), (agent, ablated)):
        assert run(name, respond, fails) == expected


def test_without_the_tool_circuit_a_failing_tool_runs_at_every_call():
    # with the circuit, the calls after it opened were refused without running (and counted as errors)
    assert run("reinloop", new_call, True) == ("error_streak", 3)
    assert run("reinloop -tool_circuit", new_call, True) == ("error_streak", 6)  # one a round


def test_without_parse_retries_a_malformed_reply_takes_a_round(tmp_path):
    bad = {"type": "invalid_tool_call", "id": "m1", "name": "lookup", "args": '{"ke', "error": None}
    rounds = {}
    for agent in ("reinloop", "reinloop -parse retries"):
        lookup, _ = counted_tool(fails=False)
        replies = [AIMessage("", invalid_tool_calls=[bad]), tool_call("lookup", {"key": "a"}), AIMessage("done")]
        outcome = _runners(FaultProfile())[agent](ScriptedChatModel(replies=replies), [lookup], TASK, {})
        rounds[agent] = outcome.rounds
    assert rounds == {"reinloop": 2, "reinloop -parse retries": 3}


def test_the_report_pairs_every_ablation_with_reinloop_in_success_and_tokens(tmp_path):
    records = evaluate_suite(profile=FaultProfile(fault_rate=0.3), seed=100, tasks=3, agents=REINLOOP_AGENTS)
    write_report(records, FaultProfile(fault_rate=0.3), 100, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "## What each guard buys" in text
    assert all(f"| {agent} | 3 |" in text.split("## What each guard buys")[1] for agent in ABLATIONS)
