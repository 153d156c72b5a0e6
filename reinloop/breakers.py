"""Why a run ends: one `Breaker` per finish reason, in priority order.

Each entry holds everything about its reason: when it trips (a predicate over the state after the round was
counted and the agent's settings), the final message `circuit_break` writes, and the exit code of the CLI.
`check_finish` tries the entries in table order and the first that trips ends the run; `answered` comes first,
so an answer on the last round still wins.

To add a finish reason:
1. add its name to `FinishReason` in `reinloop/state.py` (`FINISH_REASONS` follows by `get_args`);
2. add one `Breaker` to `BREAKERS` below, where its priority puts it. Its template may use the placeholders
   `circuit_break` fills: {iteration}, {tokens}, {budget}, {errors}, {threshold}, {last_error},
   {max_repeats}, {loop_window}, {repeats}, {repeats_after_feedback}, {repeats_after_cache}, {horizon}, {repeated},
   {tool_attempts}, {max_tool_attempts}, {round_steps}; and counts with their noun, singular for one ("1 round",
   "2 rounds"): {rounds}, {error_count}, {tool_calls}, {times_after_feedback}, {times_after_cache}.
Nothing else changes: the router sends every reason but `answered` to `circuit_break`, and the CLI reads the
exit code from here. Importing this module checks that the table and `FinishReason` agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reinloop.config import AgentConfig, round_steps
from reinloop.errors import ConfigurationError
from reinloop.state import FINISH_REASONS, NO_USAGE, AgentState, FinishReason, RunState

__all__ = ["BREAKERS", "Breaker", "breaker", "steps_to_stop", "tool_attempt_limit"]


@dataclass(frozen=True, slots=True)
class Breaker:
    """One finish reason: when it trips, what the run's final message says, and the CLI's exit code."""

    reason: FinishReason
    # Reads the state after check_finish counted the round (`iteration`, `iterations_left` already updated).
    trips: Callable[[RunState, AgentConfig], bool]
    # The final message circuit_break writes; None for `answered`, whose final message is the answer.
    template: str | None
    exit_code: int  # the CLI's exit status (1 is a crash, 2 a usage error)


def _answered(state: AgentState, settings: AgentConfig) -> bool:
    return state["decision"]["kind"] == "answer"


def _dead_loop(state: AgentState, settings: AgentConfig) -> bool:
    # validate_args refused a call this round that the model kept repeating after it was answered from cache
    # or refused (`reinloop.repeats`, rule 1).
    return any(check["error_kind"] == "repeat_after_feedback" for check in state.get("checks", []))


def _error_streak(state: AgentState, settings: AgentConfig) -> bool:
    errors = state.get("consecutive_errors", 0)
    if errors < settings.error_threshold:
        return False
    if not settings.error_reflection:
        return True
    # check_finish grants one reflection turn when the streak first reaches the threshold; the breaker trips
    # when errors continue after it (an answer from cache leaves the count as it was).
    reflected_at = state.get("reflected_at")
    return reflected_at is not None and errors > reflected_at


def _token_budget(state: AgentState, settings: AgentConfig) -> bool:
    budget = settings.run_token_budget
    return budget is not None and state.get("usage", NO_USAGE)["total_tokens"] >= budget


def tool_attempt_limit(state: AgentState, settings: AgentConfig) -> int:
    """The tool runs this run may make: `max_tool_attempts`, or `tool_attempts` per round of the iteration
    budget, whose rounds are those done and those left (the same all through a run)."""
    if settings.max_tool_attempts is not None:
        return settings.max_tool_attempts
    left = state.get("iterations_left")
    rounds = state.get("iteration", 0) + (settings.max_iterations if left is None else left)
    return settings.tool_attempts * rounds


def _max_tool_attempts(state: AgentState, settings: AgentConfig) -> bool:
    # validate_args gives no call more attempts than are left, so the count reaches the limit at most.
    if settings.max_tool_attempts is None and _max_iterations(state, settings):
        return False  # the default budget is tool_attempts per round: used up with the rounds, the rounds ended it
    return state.get("tool_attempts", 0) >= tool_attempt_limit(state, settings)


def _max_iterations(state: AgentState, settings: AgentConfig) -> bool:
    left = state.get("iterations_left")
    return left is not None and left <= 0


def steps_to_stop(settings: AgentConfig) -> int:
    """The `remaining_steps` check_finish needs to go on: one more full round, then a circuit break if that
    round trips a breaker. `remaining_steps` counts the step that reads it, and LangGraph raises
    GraphRecursionError after a step that had 0 left even if it was the last, hence the 2."""
    return round_steps(settings.max_parse_retries) + 2


def _step_limit(state: RunState, settings: AgentConfig) -> bool:
    # The caller's recursion limit, not the agent's (batch, pipes and astream_events pass LangChain's default
    # 25), would end the next round with GraphRecursionError: stop now, resumably, instead.
    left = state.get("remaining_steps")
    return left is not None and left < steps_to_stop(settings)


BREAKERS: tuple[Breaker, ...] = (
    Breaker("answered", _answered, None, exit_code=0),
    Breaker(
        "dead_loop",
        _dead_loop,
        "Stopped: a dead loop. {repeats} kept coming after being refused more than {times_after_feedback}, or "
        "answered from cache more than {times_after_cache}, within {horizon} decisions: {repeated}",
        exit_code=5,
    ),
    Breaker(
        "error_streak",
        _error_streak,
        "Stopped: {error_count} in a row (the limit is {threshold}). The last one: {last_error}",
        exit_code=4,
    ),
    Breaker(
        "token_budget",
        _token_budget,
        "Stopped: the run used {tokens} tokens after {rounds} (the budget is {budget}).",
        exit_code=6,
    ),
    Breaker(
        "max_tool_attempts",
        _max_tool_attempts,
        "Stopped: the run made {tool_calls}, retries included, in {rounds} (the limit is {max_tool_attempts}).",
        exit_code=7,
    ),
    Breaker(
        "max_iterations",
        _max_iterations,
        "Stopped: no final answer after {rounds}; the iteration budget is used up.",
        exit_code=3,
    ),
    Breaker(
        "step_limit",
        _step_limit,
        "Stopped: no final answer after {rounds}; the recursion_limit this run was invoked with leaves "
        "too few LangGraph steps for another round (one takes up to {round_steps}). batch, pipes and "
        "astream_events pass LangChain's default of 25: give a higher recursion_limit in the config, or none.",
        exit_code=8,
    ),
)

_BY_REASON: dict[str, Breaker] = {entry.reason: entry for entry in BREAKERS}


def breaker(reason: FinishReason) -> Breaker:
    """The table entry of `reason`."""
    return _BY_REASON[reason]


def _check_table() -> None:
    # A developer error in this module, caught at import rather than as a KeyError at the end of some run.
    if sorted(_BY_REASON) != sorted(FINISH_REASONS) or len(_BY_REASON) != len(BREAKERS):
        raise ConfigurationError(
            f"BREAKERS must hold one entry per FinishReason: the table has {[b.reason for b in BREAKERS]}, "
            f"FinishReason has {list(FINISH_REASONS)}"
        )
    codes = [entry.exit_code for entry in BREAKERS]
    if len(set(codes)) != len(codes) or {1, 2} & set(codes):
        raise ConfigurationError(f"BREAKERS need distinct exit codes other than 1 (crash) and 2 (usage): {codes}")
    if [entry.reason for entry in BREAKERS if entry.template is None] != ["answered"]:
        raise ConfigurationError("every reason but 'answered' needs a final-message template")


_check_table()
