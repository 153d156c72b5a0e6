"""The guard interface (`reinloop.guards`): a guard of your own added, replacing or dropping a built-in one
without touching reinloop's files, and the built-in guards' settings (the per-tool circuit breaker built on it:
tests/guards/test_tool_circuit.py)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from typing_extensions import TypedDict

from reinloop import AgentConfig, build_agent, resume
from reinloop.errors import ConfigurationError
from reinloop.guards import (
    DEFAULT_GUARDS,
    DeadLoop,
    ErrorStreak,
    Guard,
    Round,
    Stop,
    TokenBudget,
    ToolAttempts,
    ToolCircuit,
    default_guards,
    disable,
    exit_codes,
    guard_table,
    refuse,
    steps_to_stop,
)
from reinloop.state import CallCheck
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import add, new_thread

NAMES = [guard.name for guard in DEFAULT_GUARDS]


class Refusals(TypedDict, total=False):
    refused_calls: int


class NoDivision(Guard):
    """Refuses every call of a tool named "divide", counts the refusals in a key of its own, and ends the run
    after `most` of them."""

    name = "no_division"
    exit_code = 42
    state_schema = Refusals
    initial: ClassVar = {"refused_calls": 0}

    def __init__(self, most: int = 2) -> None:
        self.most = most

    def judge(self, calls: list[CallCheck], state: Any) -> list[CallCheck]:
        return [refuse(call, "Error: no division here.") if call["name"] == "divide" else call for call in calls]

    def observe(self, round: Round, state: Any) -> dict[str, Any]:
        refused = sum(seen.check["name"] == "divide" for seen in round.calls)
        return {"refused_calls": state.get("refused_calls", 0) + refused}

    def check(self, state: Any) -> Stop | None:
        refused = state.get("refused_calls", 0)
        if refused < self.most:
            return None
        return Stop(f"Stopped: {refused} calls of divide were refused in {state['iteration']} rounds.")


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


def test_a_guard_of_your_own_judges_calls_keeps_its_state_and_ends_runs_with_its_reason():
    replies = [
        tool_call("divide", {"a": 1, "b": 2}),
        tool_call("add", {"a": 1, "b": 2}),
        tool_call("divide", {"a": 4, "b": 2}),
    ]
    model = ScriptedChatModel(replies=[*replies, "never sent"])
    agent = build_agent(model, [add, divide], guards=[NoDivision()], checkpointer=InMemorySaver())
    thread = new_thread()
    result = agent.invoke({"task": "t"}, thread)
    assert result["finish_reason"] == "no_division" and result["refused_calls"] == 2
    assert result["messages"][-1].content.startswith("Stopped: 2 calls of divide were refused in 3 rounds.")
    assert [call.messages[-1].content for call in model.calls[1:]] == ["Error: no division here.", "3"]
    assert [m.content for m in result["messages"] if m.type == "tool"][-1] == "Error: no division here."
    # its key is saved, and a resume gives it a fresh budget as it gives the built-in guards theirs
    assert agent.get_state(thread).values["refused_calls"] == 2
    model.replies.append("done")
    assert (resumed := resume(agent, thread))["finish_reason"] == "answered" and resumed["refused_calls"] == 0


def test_a_tool_cannot_write_a_guard_s_key_with_a_command():
    @tool
    def forge(note: str, call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Forge the guard's count."""
        return Command(update={"refused_calls": -100, "messages": [ToolMessage("ok", tool_call_id=call_id)]})

    model = ScriptedChatModel(replies=[tool_call("forge", {"note": "x"}), "done"])
    result = build_agent(model, [forge], guards=[NoDivision()]).invoke({"task": "t"})
    assert result.get("refused_calls", 0) == 0
    assert [m.status for m in result["messages"] if m.type == "tool"] == ["error"]


def test_the_output_schema_types_a_finish_reason_of_your_own_beside_the_built_in_ones():
    agent = build_agent(ScriptedChatModel(), [add], guards=[NoDivision()])
    properties = agent.get_output_jsonschema()["properties"]
    assert properties["finish_reason"]["anyOf"][0]["enum"][-2:] == ["middleware", "no_division"]
    assert "refused_calls" in properties
    plain = build_agent(ScriptedChatModel(), [add]).get_output_jsonschema()["properties"]
    assert "no_division" not in plain["finish_reason"]["anyOf"][0]["enum"]


def test_a_guard_with_a_built_in_name_replaces_it_and_disable_drops_one():
    class Patient(Guard):
        name = "error_streak"
        exit_code = 4

        def check(self, state: Any) -> None:
            return None

    table = guard_table([Patient(), disable("tool_circuit")])
    names = [guard.name for guard in table]
    assert names == [name for name in NAMES if name != "tool_circuit"]
    assert isinstance(table[names.index("error_streak")], Patient)
    # a new guard goes before the two that end every run that goes on too long
    assert [guard.name for guard in guard_table([NoDivision()])][-3:] == ["no_division", "max_iterations", "step_limit"]
    assert exit_codes(guard_table([NoDivision()]))["no_division"] == 42


@pytest.mark.parametrize(
    ("guards", "problem"),
    [
        ([disable("nonesuch")], "no such guard"),
        ([NoDivision(), NoDivision()], "name of its own"),
        ([type("Zero", (NoDivision,), {"name": "zero", "exit_code": 2})()], "exit_code"),
        ([type("Busy", (NoDivision,), {"name": "busy", "exit_code": 75})()], "other than 75 and 130"),
        ([type("Same", (NoDivision,), {"name": "same", "exit_code": 4})()], "distinct exit codes"),
        ([type("Again", (NoDivision,), {"name": "answered", "exit_code": 50})()], "finish reason of an answer"),
        ([type("Mute", (NoDivision,), {"name": "mute", "exit_code": None})()], "it has a check"),
        (["error_streak"], "Guard objects"),
    ],
)
def test_a_guard_table_that_cannot_work_is_refused_at_build_time(guards, problem):
    with pytest.raises(ConfigurationError, match=problem):
        build_agent(ScriptedChatModel(), [add], guards=guards)


# The built-in guards' settings -----------------------------------------------------------------------------


def test_the_built_in_guards_defaults_are_agent_config_s_and_its_settings_reach_them():
    # A built-in guard made with no arguments is the one the default settings make: the defaults cannot drift.
    for built, bare in zip(default_guards(AgentConfig()), DEFAULT_GUARDS, strict=True):
        assert vars(type(bare)()) == vars(built) == vars(bare), built.name
    settings = AgentConfig(loop_window=4, max_repeats=3, loop_key="tool", error_threshold=5, error_reflection=False,
                           run_token_budget=900, max_tool_attempts=7, max_parse_retries=2)  # fmt: skip
    guards = {guard.name: guard for guard in default_guards(settings)}
    assert (guards["dead_loop"].loop_window, guards["dead_loop"].max_repeats, guards["dead_loop"].loop_key) == (
        4,
        3,
        "tool",
    )
    assert (guards["error_streak"].threshold, guards["error_streak"].reflection) == (5, False)
    assert (guards["token_budget"].budget, guards["max_tool_attempts"].max_tool_attempts) == (900, 7)
    assert guards["step_limit"].needed == steps_to_stop(2)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: DeadLoop(loop_window=0), "loop_window >= 1"),
        (lambda: DeadLoop(loop_key="args"), "loop_key"),
        (lambda: ErrorStreak(threshold=0), "threshold >= 1"),
        (lambda: TokenBudget(0), "budget >= 1"),
        (lambda: ToolAttempts(max_tool_attempts=0), "max_tool_attempts >= 1"),
        (lambda: ToolCircuit(failures=0), "failures >= 1"),
    ],
)
def test_a_built_in_guard_refuses_settings_that_cannot_work(make, problem):
    with pytest.raises(ConfigurationError, match=problem):
        make()


def test_a_built_in_guard_given_to_build_agent_uses_its_own_settings_over_the_config():
    model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": n}) for n in range(10)])
    agent = build_agent(model, [add], config=AgentConfig(run_token_budget=10**6), guards=[TokenBudget(1)])
    assert agent.invoke({"task": "t"})["finish_reason"] == "token_budget"
