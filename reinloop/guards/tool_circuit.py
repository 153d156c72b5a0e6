"""The per-tool circuit breaker (`tool_circuit`): a tool that keeps failing is not run for a while.

A tool's circuit opens after `failures` calls of it in a row failed (in-place retries count once): its calls
are refused unrun (`circuit_open`) for `cooldown` decisions, then a trial call closes it or opens it again for
twice as long; a tool whose last call failed gets no in-place retries until one succeeds. The guard never ends
a run: refused calls are errors, which the error streak counts. Its state, `circuits` (one `Circuit` per tool
that failed since its last success), is saved with the thread and kept by a fresh budget: a tool that is down
stays down across runs of the thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reinloop.guards.base import Guard, Round, at_least, refuse
from reinloop.state import AgentState, CallCheck, Circuit, ErrorKind, runs
from reinloop.text import counted

__all__ = ["CIRCUIT_OPEN_TEMPLATE", "TOOL_FAILURES", "TRIAL_UNDER_WAY_TEMPLATE", "ToolCircuit", "circuit_text"]

CIRCUIT_OPEN_TEMPLATE = (
    "Error: not run: {name!r} is unavailable: its last {failed} failed. It can be tried again in {left}. "
    "Use another tool, or answer with what you know."
)
TRIAL_UNDER_WAY_TEMPLATE = (
    "Error: not run: {name!r} has been failing; only one call of it is tried this decision, and another one is. "
    "Wait for its result."
)
# What counts as a failure of the tool itself (not of the model's call, which validation catches first).
TOOL_FAILURES: frozenset[ErrorKind] = frozenset({"tool_error", "timeout", "empty_result"})


class ToolCircuit(Guard):
    """One circuit per tool: closed, open for a number of decisions, half-open for one trial call."""

    name = "tool_circuit"

    def __init__(self, failures: int = 3, cooldown: int = 3) -> None:
        at_least("ToolCircuit", failures=(failures, 1), cooldown=(cooldown, 1))
        self.failures = failures
        self.cooldown = cooldown

    def judge(self, calls: list[CallCheck], state: AgentState) -> list[CallCheck]:
        circuits = state.get("circuits") or {}
        trials: set[str] = set()
        judged: list[CallCheck] = []
        for check in calls:
            circuit = circuits.get(check["name"])
            if circuit is None or not runs(check):
                judged.append(check)
                continue
            name = check["name"]
            if circuit["left"] > 0:
                message = CIRCUIT_OPEN_TEMPLATE.format(
                    name=name, failed=counted(circuit["failures"], "call"), left=counted(circuit["left"], "decision")
                )
                check = refuse(check, message, "circuit_open")
            elif name in trials:
                check = refuse(check, TRIAL_UNDER_WAY_TEMPLATE.format(name=name), "circuit_open")
            else:
                trials.add(name)
                check = {**check, "attempts": 1}  # no in-place retries for a tool that is failing
            judged.append(check)
        return judged

    def observe(self, round: Round, state: AgentState) -> dict[str, Any]:
        before = state.get("circuits") or {}
        # A decision went by: open circuits count down towards their trial.
        circuits = {
            name: Circuit(**{**circuit, "left": max(circuit["left"] - 1, 0)}) for name, circuit in before.items()
        }
        for seen in round.calls:
            if seen.outcome is None:
                continue
            name, circuit = seen.check["name"], circuits.get(seen.check["name"])
            if seen.error_kind is None:
                circuits.pop(name, None)  # a success closes it
            elif seen.error_kind in TOOL_FAILURES:
                circuits[name] = self._failed(circuit)
        return {"circuits": circuits} if circuits != before else {}

    def _failed(self, circuit: Circuit | None) -> Circuit:
        failures = 1 if circuit is None else circuit["failures"] + 1
        if circuit is not None and circuit["opened"] > 0:  # a trial failed: open again, for twice as long
            cooldown = 2 * circuit["cooldown"]
            return Circuit(failures=failures, opened=circuit["opened"] + 1, cooldown=cooldown, left=cooldown)
        if failures >= self.failures:
            return Circuit(failures=failures, opened=1, cooldown=self.cooldown, left=self.cooldown)
        return Circuit(failures=failures, opened=0, cooldown=0, left=0)


def circuit_text(circuit: Mapping[str, Any]) -> str:
    """A tool's circuit (its state entry, `Circuit`) in words, as the command and the page show it."""
    failed = f"{circuit['failures']} failed call{'s' if circuit['failures'] != 1 else ''} in a row"
    if not circuit["opened"]:
        return f"closed, {failed}"
    if circuit["left"]:
        return f"open, {failed}; a trial call in {circuit['left']} decision{'s' if circuit['left'] != 1 else ''}"
    return f"half-open, {failed}; the next call is a trial"
