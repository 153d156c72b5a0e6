"""The per-tool circuit breaker (`reinloop.guards.tool_circuit`): a tool that keeps failing is refused unrun until
a trial call after its cooldown; a success closes the circuit."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.tools import tool
from rich.console import Console

from reinloop import AgentConfig, build_agent
from reinloop.cli.display import thread_state
from reinloop.guards import (
    CallResult,
    Round,
    ToolCircuit,
)
from reinloop.guards.tool_circuit import CIRCUIT_OPEN_TEMPLATE
from reinloop.state import CallCheck, ToolOutcome
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from tests.conftest import add, new_thread


class Backend:
    """A tool that fails while `down`, counting its runs; a fetch, declared safe to repeat."""

    def __init__(self) -> None:
        self.runs = 0
        self.down = True

        @tool
        def fetch(query: str) -> str:
            """Fetch a page."""
            self.runs += 1
            if self.down:
                raise ConnectionError("backend unavailable")
            return f"page for {query}"

        fetch.metadata = {"reinloop": {"retryable": True}}
        self.tool = fetch


def calls_of_fetch(rounds: int) -> list[Any]:
    return [tool_call("fetch", {"query": f"q{n}"}) for n in range(rounds)]


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_a_tool_that_always_fails_runs_at_most_tool_attempts_times_failures_in_a_20_round_run(sync):
    backend = Backend()
    model = ScriptedChatModel(replies=calls_of_fetch(20))
    settings = AgentConfig(max_iterations=20, error_threshold=100, tool_backoff_s=0, max_replans=0)
    agent = build_agent(model, [backend.tool, add], config=settings)
    result = agent.invoke({"task": "t"}) if sync else asyncio.run(agent.ainvoke({"task": "t"}))
    assert result["finish_reason"] == "max_iterations" and result["iteration"] == 20
    # 3 attempts, then one each until it opens after 3 failed calls, then one trial per cooldown (3, then 6)
    assert backend.runs == 3 + 1 + 1 + 1 + 1 <= settings.tool_attempts * 3
    assert result["circuits"]["fetch"]["left"] > 0  # open at the end of the run
    # what decisions 5 to 7 were told after the circuit opened in round 3, and decision 8 after the trial
    told = [call.messages[-1].content for call in model.calls[4:8]]
    assert told[0] == CIRCUIT_OPEN_TEMPLATE.format(name="fetch", failed="3 calls", left="3 decisions")
    assert told[2] == CIRCUIT_OPEN_TEMPLATE.format(name="fetch", failed="3 calls", left="1 decision")
    assert told[3].startswith("Error: 'fetch' failed: ConnectionError")  # the trial ran, once, and failed


def test_a_trial_call_that_succeeds_closes_the_circuit_and_retries_come_back():
    backend = Backend()
    model = ScriptedChatModel(replies=[*calls_of_fetch(7), "done"])
    agent = build_agent(model, [backend.tool], config=AgentConfig(error_threshold=100, tool_backoff_s=0))
    thread = new_thread()
    original = backend.tool.func

    def recovering(query: str) -> str:
        backend.down = backend.runs < 5  # up from the sixth run on: the trial after the first cooldown
        return original(query)

    backend.tool.func = recovering
    result = agent.invoke({"task": "t"}, thread)
    assert result["final_answer"] == "done"
    assert "circuits" not in result or result["circuits"] == {}
    assert [m.content for m in result["messages"] if m.type == "tool"][-1] == "page for q6"


def test_the_circuit_counts_a_call_once_whatever_its_retries_and_a_success_resets_it():
    circuit = ToolCircuit(failures=2, cooldown=1)

    def outcome(check: CallCheck, error: str | None) -> Any:
        ran = ToolOutcome(call_id=check["call_id"], name="add", content="x", error_kind=error, attempts=3)
        return CallResult(check, ran, "x", error)

    check = CallCheck(
        call_id="c", name="add", args={}, signature="add{}", key="k", attempts=3, error_kind=None, error=None
    )
    state: dict[str, Any] = {}
    state.update(circuit.observe(Round(calls=(outcome(check, "tool_error"),)), state))
    assert state["circuits"]["add"] == {"failures": 1, "opened": 0, "cooldown": 0, "left": 0}
    (judged,) = circuit.judge([check], state)
    assert judged["attempts"] == 1  # no in-place retries for a tool that is failing
    state.update(circuit.observe(Round(calls=(outcome(check, "timeout"),)), state))
    assert state["circuits"]["add"]["left"] == 1
    (judged,) = circuit.judge([check], state)
    assert judged["error_kind"] == "circuit_open"
    state.update(circuit.observe(Round(calls=(refused := _refused(judged),)), state))
    assert refused.outcome is None and state["circuits"]["add"]["left"] == 0  # half-open
    first, second = circuit.judge([check, {**check, "call_id": "d"}], state)
    assert (first["error_kind"], second["error_kind"]) == (None, "circuit_open")  # one trial at a time
    state.update(circuit.observe(Round(calls=(outcome(check, None),)), state))
    assert state["circuits"] == {}


def _refused(check: CallCheck) -> Any:
    return CallResult(check, None, check["error"] or "", check["error_kind"])


def test_reinloop_show_lists_the_circuits_saved_with_the_thread():
    circuits = {"fetch": {"failures": 3, "opened": 1, "cooldown": 3, "left": 2}}
    snapshot = SimpleNamespace(values={"task": "t", "circuits": circuits}, next=())
    out = io.StringIO()
    thread_state(Console(file=out, width=200), "t1", snapshot)
    assert "circuit fetch: open, 3 failed calls in a row; a trial call in 2 decisions" in out.getvalue()


def test_a_refused_call_of_an_open_circuit_counts_in_the_error_streak():
    backend = Backend()
    model = ScriptedChatModel(replies=calls_of_fetch(12))
    result = build_agent(model, [backend.tool], config=AgentConfig(tool_backoff_s=0)).invoke({"task": "t"})
    assert result["finish_reason"] == "error_streak" and backend.runs <= 9


def test_parallel_calls_of_a_failing_tool_get_one_trial():
    backend = Backend()
    replies = [*calls_of_fetch(3), *[tool_call("add", {"a": 1, "b": n}) for n in range(3)]]
    replies += [parallel_calls([("fetch", {"query": "x"}), ("fetch", {"query": "y"})]), "done"]
    agent = build_agent(ScriptedChatModel(replies=replies), [backend.tool, add], config=AgentConfig(tool_backoff_s=0))
    backend.down = True
    result = agent.invoke({"task": "t"})
    *_, trial, other = [m for m in result["messages"] if m.type == "tool"]
    assert "backend unavailable" in trial.content and "only one call of it is tried" in other.content
