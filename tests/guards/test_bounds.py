"""Every guard stops its runaway model within the worst case `AgentConfig.worst_case()` computes.

Property tests over the settings crossed with runaway models: each run must end in one of its bound's stops,
never after its rounds, decisions, tool runs or tokens. CI runs a bounded number of examples;
REINLOOP_PROPERTY_EXAMPLES raises it (e.g. 2000).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool, tool

from reinloop import AgentConfig, build_agent
from reinloop.bounds import RUNAWAYS, Bound, Runaway
from reinloop.testing import ScriptedChatModel, json_action, tool_call
from tests.conftest import THREAD

EXAMPLES = int(os.environ.get("REINLOOP_PROPERTY_EXAMPLES", "12"))
# What each runaway's replies look like under its protocol: "native" tool calls, or a text protocol.
UNREADABLE = {
    "tool_calling": "",  # an empty reply
    "json": "I think I should look into this further before I decide.",  # neither an answer nor a call
    "react": "Thought: hmm\nAction: add[",  # a malformed action
}


@dataclass
class Ledger:
    """The tool runs of one run, by tool."""

    runs: list[str] = field(default_factory=list)

    def tools(self) -> list[BaseTool]:
        runs = self.runs

        @tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            runs.append("add")
            return a + b

        @tool
        def clock(zone: str) -> str:
            """The time in a zone (its result changes: not cacheable)."""
            runs.append("clock")
            return f"12:00 in {zone}"

        @tool
        def explode(reason: str) -> str:
            """Always fails; declared safe to retry, so every attempt it may get is used."""
            runs.append("explode")
            raise RuntimeError(f"boom: {reason}")

        @tool
        def blank(key: str) -> str:
            """Always returns an empty result."""
            runs.append("blank")
            return ""

        clock.metadata = {"reinloop": {"cacheable": False}}
        explode.metadata = {"reinloop": {"retryable": True}}
        return [add, clock, explode, blank]


def _call(name: str, args: dict[str, Any], protocol: str) -> AIMessage | str:
    if protocol == "tool_calling":
        return tool_call(name, args)
    if protocol == "json":
        return json_action(name, args)
    return f"Thought: go\nAction: {name}[{json.dumps(args)}]"


def runaway_reply(runaway: Runaway, n: int, protocol: str, mix: list[int]) -> AIMessage | str:
    """The `n`-th reply (from 0) of the runaway model."""
    if runaway == "same_call":
        return _call("add", {"a": 1, "b": 1}, protocol)
    if runaway == "same_uncached_call":
        return _call("clock", {"zone": "UTC"}, protocol)
    if runaway == "two_calls_in_turn":
        return _call("add", {"a": n % 2, "b": 1}, protocol)
    if runaway == "three_calls_in_turn":
        return _call("add", {"a": n % 3, "b": 1}, protocol)
    if runaway == "same_failing_call":
        return _call("explode", {"reason": "x"}, protocol)
    if runaway == "failing_calls":
        return _call("explode", {"reason": str(n)}, protocol)
    if runaway == "empty_results":
        return _call("blank", {"key": str(n)}, protocol)
    if runaway == "invalid_calls":
        return _call("add", {"a": f"x{n}"}, protocol)  # a string for an integer, and b missing
    if runaway == "unreadable_replies":
        return UNREADABLE[protocol]
    # "any": a mix, of failures, mistakes and successes
    kinds = ["fresh_failure", "same_failure", "invalid", "unreadable", "uncached", "new_success", "same_success"]
    kind = kinds[mix[n % len(mix)] % len(kinds)]
    return {
        "fresh_failure": lambda: _call("explode", {"reason": str(n)}, protocol),
        "same_failure": lambda: _call("explode", {"reason": "x"}, protocol),
        "invalid": lambda: _call("add", {"a": f"x{n}"}, protocol),
        "unreadable": lambda: UNREADABLE[protocol],
        "uncached": lambda: _call("clock", {"zone": "UTC"}, protocol),
        "new_success": lambda: _call("add", {"a": n, "b": 1}, protocol),
        "same_success": lambda: _call("add", {"a": 1, "b": 1}, protocol),
    }[kind]()


def run_runaway(
    runaway: Runaway, config: AgentConfig, mix: tuple[int, ...] = (0,)
) -> tuple[dict[str, Any], int, int, int]:
    """The run's final state, its decisions, its tool runs and the agent's context budget."""
    ledger, decisions = Ledger(), itertools.count()

    def respond(messages: list[BaseMessage]) -> AIMessage | str:
        return runaway_reply(runaway, next(decisions), config.protocol, list(mix))

    calls = config.max_iterations * (1 + config.max_parse_retries) + 1
    model = ScriptedChatModel(respond=respond, max_calls=calls)
    summarizer = ScriptedChatModel(respond=lambda messages: "earlier steps")
    agent = build_agent(model, ledger.tools(), config=config, summary_model=summarizer)
    result = agent.invoke({"task": "Add the numbers, then answer."}, THREAD)
    return result, len(model.calls), len(ledger.runs), agent.context_token_budget


def assert_within(bound: Bound, result: dict[str, Any], decisions: int, executions: int) -> None:
    spent, most = (result["iteration"], decisions, executions), (bound.rounds, bound.decisions, bound.executions)
    assert result["finish_reason"] in bound.stops, (result["finish_reason"], bound)
    assert all(got <= limit for got, limit in zip(spent, most, strict=True)), (spent, bound)
    if bound.tokens is not None:
        assert result["usage"]["total_tokens"] <= bound.tokens


SETTINGS = st.fixed_dictionaries(
    {
        "max_iterations": st.integers(1, 40),
        "error_threshold": st.integers(1, 6),
        "error_reflection": st.booleans(),
        "max_replans": st.integers(0, 3),
        "max_parse_retries": st.integers(0, 2),
        "loop_window": st.integers(1, 5),
        "max_repeats": st.integers(1, 4),
        "loop_key": st.sampled_from(["call", "tool"]),
        "max_stalled": st.integers(0, 3),
        "repeats_after_feedback": st.integers(0, 5),
        "repeats_after_cache": st.integers(0, 5),
        "tool_attempts": st.integers(1, 3),
        "protocol": st.sampled_from(["tool_calling", "json", "react"]),
    }
)


@pytest.mark.parametrize("runaway", RUNAWAYS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=SETTINGS, mix=st.lists(st.integers(0, 6), min_size=1, max_size=8))
def test_no_runaway_model_outlives_its_computed_worst_case(runaway: Runaway, values: dict[str, Any], mix: list[int]):
    config = AgentConfig(**values, tool_backoff_s=0.0)
    result, decisions, executions, budget = run_runaway(runaway, config, tuple(mix))
    assert_within(config.worst_case(budget)[runaway], result, decisions, executions)


GUARDED: dict[Runaway, str] = {
    "same_call": "dead_loop",
    "two_calls_in_turn": "dead_loop",
    "three_calls_in_turn": "dead_loop",
    "same_uncached_call": "dead_loop",
    "same_failing_call": "error_streak",
    "failing_calls": "error_streak",
    "empty_results": "error_streak",
}


@pytest.mark.parametrize("max_iterations", [20, 50, 200])
@pytest.mark.parametrize("runaway", list(GUARDED))
def test_under_the_defaults_each_runaway_ends_in_its_guards_stop_within_10_decisions(runaway, max_iterations):
    protocol = "json" if runaway == "unreadable_replies" else "tool_calling"
    config = AgentConfig(max_iterations=max_iterations, protocol=protocol, tool_backoff_s=0.0)
    result, decisions, executions, budget = run_runaway(runaway, config)
    bound = config.worst_case(budget)[runaway]
    assert (result["finish_reason"], bound.stops[0]) == (GUARDED[runaway], GUARDED[runaway])
    assert decisions <= bound.decisions <= 10
    assert_within(bound, result, decisions, executions)
    if runaway in ("same_call", "same_uncached_call"):
        assert executions <= 2  # an identical successful call runs at most twice


@pytest.mark.parametrize("runaway", ["unreadable_replies", "invalid_calls"])
def test_the_models_own_mistakes_are_no_error_streak_and_end_at_max_iterations(runaway: Runaway):
    config = AgentConfig(max_iterations=8, tool_backoff_s=0.0)
    result, decisions, executions, _ = run_runaway(runaway, config)
    bound = config.worst_case()[runaway]
    assert (result["finish_reason"], result["consecutive_errors"], executions) == ("max_iterations", 0, 0)
    per_round = 1 + config.max_parse_retries if runaway == "unreadable_replies" else 1
    assert (result["iteration"], decisions) == (bound.rounds, bound.decisions) == (8, 8 * per_round)


@pytest.mark.parametrize("runaway", ["same_call", "two_calls_in_turn", "failing_calls", "unreadable_replies"])
def test_the_bounds_are_reached_not_only_respected(runaway: Runaway):
    # A bound that is never reached would hide a guard that stops too late behind a loose formula.
    config = AgentConfig(tool_backoff_s=0.0)
    bound = config.worst_case()[runaway]
    result, decisions, _, _ = run_runaway(runaway, config)
    assert (result["iteration"], decisions) == (bound.rounds, bound.decisions)


def test_the_worst_case_prints_as_a_table_with_a_row_per_runaway():
    table = AgentConfig().worst_case().table().splitlines()
    assert len(table) == 2 + len(RUNAWAYS)
    assert table[2].startswith("| the same successful call forever | dead_loop | 6 | 6 | 1 |")


def test_each_re_plan_buys_exactly_one_round():
    for runaway in GUARDED:
        rounds = [AgentConfig(max_replans=n).worst_case()[runaway].rounds for n in range(4)]  # type: ignore[index]
        assert rounds == [rounds[0] + n for n in range(4)], runaway


def test_the_readme_shows_the_worst_case_of_the_defaults():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert AgentConfig().worst_case().table() in readme
