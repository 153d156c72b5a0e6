"""The worst case of every guard, from the settings alone (`AgentConfig.worst_case()`).

For each runaway model a guard is for (one call a decision, as the issue's probes made them), the latest round it
stops, with the decisions (model calls of decide, parse retries included), tool executions (retries included) and
tokens spent by then; and for the whole run. The figures follow from the rules of `reinloop.guards` (the property
tests in tests/guards/test_bounds.py run every runaway against them): each round of a runaway a guard is for adds
an error or a stalled decision, the error streak trips at its threshold (a round later with the reflection turn),
the dead-loop rule after `max_stalled` stalled decisions, and each re-plan buys one round, since the guards keep
what they know. The model's own mistakes (unreadable replies, unknown tools, invalid arguments) are no guard's:
`max_iterations` and the token budgets end them (docs/guards.md says what limiting them cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from reinloop.config import AgentConfig

__all__ = ["RUNAWAYS", "Bound", "Runaway", "WorstCase", "worst_case"]

Runaway = Literal[
    "same_call",  # one identical call forever, a success (a cacheable tool)
    "same_uncached_call",  # one identical call forever, a success, of a tool declared cacheable=False
    "two_calls_in_turn",  # two identical successful calls taking turns
    "three_calls_in_turn",  # three identical successful calls taking turns
    "same_failing_call",  # one identical call forever, failing
    "failing_calls",  # a failing call with new arguments each time
    "empty_results",  # a call with new arguments each time, always an empty ("pseudo-success") result
    "invalid_calls",  # a call with new invalid arguments each time
    "unreadable_replies",  # replies that cannot be read: empty, malformed, text that is neither answer nor call
    "any",  # any model: the whole run
]
RUNAWAYS: tuple[Runaway, ...] = get_args(Runaway)

_WHAT: dict[Runaway, str] = {
    "same_call": "the same successful call forever",
    "same_uncached_call": "the same successful call of a tool with cacheable=False",
    "two_calls_in_turn": "two successful calls taking turns",
    "three_calls_in_turn": "three successful calls taking turns",
    "same_failing_call": "the same failing call forever",
    "failing_calls": "failing calls, new arguments each time",
    "empty_results": "empty results, new arguments each time",
    "invalid_calls": "invalid arguments, new each time",
    "unreadable_replies": "unreadable replies (empty, malformed, neither answer nor call)",
    "any": "any model (the whole run)",
}


@dataclass(frozen=True, slots=True)
class Bound:
    """The latest a runaway stops and what it spent by then: never more (the budgets may stop it sooner)."""

    runaway: Runaway
    stops: tuple[str, ...]  # the finish reasons it may end with; the first is the usual one
    rounds: int
    decisions: int  # model calls of decide, parse retries included
    executions: int  # tool runs, in-place retries included
    model_calls: int  # decisions and summaries (at most one fold a round), and the pick of the run's tools
    # Prompt and reply tokens of those calls; None: max_reply_tokens is None (no cap), or no context budget was
    # given (the default: build_agent resolves it from the model and the tools).
    tokens: int | None

    @property
    def what(self) -> str:
        return _WHAT[self.runaway]


@dataclass(frozen=True, slots=True)
class WorstCase:
    """One `Bound` per runaway (`RUNAWAYS`), printable as a table."""

    bounds: tuple[Bound, ...]
    reply_tokens: int | None = None  # max_reply_tokens: with no budget given, tokens show per budget

    def __getitem__(self, runaway: Runaway) -> Bound:
        for bound in self.bounds:
            if bound.runaway == runaway:
                return bound
        raise KeyError(runaway)

    def table(self) -> str:
        """A Markdown table, one row per runaway."""
        rows = [
            "| runaway | stop | rounds | decisions | tool runs | tokens |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for bound in self.bounds:
            tokens = self._per_budget(bound) if bound.tokens is None else f"{bound.tokens:,}"
            rows.append(
                f"| {bound.what} | {' or '.join(bound.stops)} | {bound.rounds} | {bound.decisions} | "
                f"{bound.executions} | {tokens} |"
            )
        return "\n".join(rows)

    def _per_budget(self, bound: Bound) -> str:
        """A bound's tokens when the settings alone do not give them: no cap, or a product of the budget."""
        if self.reply_tokens is None:
            return "no limit"
        return f"{bound.model_calls} * (budget + {self.reply_tokens:,})"

    def __str__(self) -> str:
        return self.table()


def worst_case(settings: AgentConfig, circuit: bool = True, context_token_budget: int | None = None) -> WorstCase:
    """Each runaway's bound under `settings`, with the built-in guards (`circuit`: with the tool circuit,
    which gives a failing tool no in-place retries after its first failure), each prompt at most
    `context_token_budget` (None: the setting's)."""
    rules = _Rules(settings, circuit, context_token_budget or settings.context_token_budget)
    return WorstCase(tuple(rules.bound(runaway) for runaway in RUNAWAYS), settings.max_reply_tokens)


class _Rules:
    """The guards' rules, counted in rounds."""

    def __init__(self, settings: AgentConfig, circuit: bool, budget: int | None) -> None:
        self.settings, self.circuit, self.budget = settings, circuit, budget
        s = settings
        self.horizon = s.loop_window + max(s.repeats_after_feedback, s.repeats_after_cache)
        # Rounds in which an identical call reaches the tool before the repeat refusal stops it (None: never).
        self.runs_before_refusal = s.max_repeats if s.loop_window > s.max_repeats else None
        # The round in which the error streak trips, one error a round.
        self.error_trip = s.error_threshold + int(s.error_reflection)
        # The tool runs a whole run may make (ToolAttempts).
        self.tool_budget = s.max_tool_attempts or s.tool_attempts * s.max_iterations

    def bound(self, runaway: Runaway) -> Bound:
        s = self.settings
        if runaway == "any":
            return self._made(
                runaway,
                ("max_iterations", "dead_loop", "error_streak", "max_tool_attempts", "token_budget"),
                s.max_iterations,
                1 + s.max_parse_retries,
                None,
            )
        if runaway in ("unreadable_replies", "invalid_calls"):
            # The model's mistakes: no errors of the streak, never judged as repeats, and nothing runs.
            per_round = 1 + s.max_parse_retries if runaway == "unreadable_replies" else 1
            return self._made(runaway, ("max_iterations",), s.max_iterations, per_round, 0)
        if runaway in ("same_call", "two_calls_in_turn", "three_calls_in_turn"):
            calls = {"same_call": 1, "two_calls_in_turn": 2, "three_calls_in_turn": 3}[runaway]
            return self._known(runaway, calls)
        if runaway == "same_uncached_call":
            runs = self.runs_before_refusal
            return self._repeats(runaway, runs, errors=False)
        if s.loop_key == "tool":
            # Keyed on the tool, new arguments are repeats of the tool too, refused whatever their outcomes.
            return self._repeats(runaway, self.runs_before_refusal, errors=True)
        # Keyed on the call: a failing call is never refused (the model may retry what may pass), and new
        # arguments are never a repeat: every round an error.
        return self._stopped(runaway, self.error_trip, None, 1, None)

    def _known(self, runaway: Runaway, calls: int) -> Bound:
        """Successful calls taking turns: each runs once, then is answered from cache while in the horizon."""
        s = self.settings
        if calls <= self.horizon - 1:
            return self._stopped(runaway, None, calls + s.max_stalled + 1, 1, calls)
        if s.loop_key == "tool" and self.runs_before_refusal is not None:
            return self._repeats(runaway, self.runs_before_refusal, errors=False)
        return self._made(runaway, ("max_iterations",), s.max_iterations, 1, s.max_iterations)

    def _repeats(self, runaway: Runaway, runs: int | None, errors: bool) -> Bound:
        """A call (or tool) repeated: it runs `runs` rounds (None: every round), then is refused each round."""
        s = self.settings
        if runs is None:
            if not errors:
                return self._made(runaway, ("max_iterations",), s.max_iterations, 1, s.max_iterations)
            return self._stopped(runaway, self.error_trip, None, 1, None)
        error_trip = self.error_trip if errors and self.error_trip <= runs else None
        stalled_trip = runs + s.max_stalled + 1
        return self._stopped(runaway, error_trip, stalled_trip, 1, None if errors else runs, runs=runs)

    def _stopped(
        self,
        runaway: Runaway,
        error_trip: int | None,
        stalled_trip: int | None,
        per_round: int,
        executions: int | None,
        *,
        runs: int | None = None,
    ) -> Bound:
        """The bound when the error streak first trips in round `error_trip` and the dead-loop rule in round
        `stalled_trip` (None: never): each re-plan then buys one round, since both stay tripped. `executions`
        None: one failing call a round that reaches the tool (`runs` rounds, None: every round)."""
        s = self.settings
        trips = [trip for trip in (error_trip, stalled_trip) if trip is not None]
        last = min(trips) + s.max_replans
        # dead_loop comes first in the table: it ends the run if it trips by the last round; rule 1 (refused
        # after feedback) may trip it sooner than `stalled_trip` whenever it applies.
        usual = "dead_loop" if stalled_trip is not None and last >= stalled_trip else "error_streak"
        sooner = ("dead_loop",) if stalled_trip is not None else ()
        stops = tuple(dict.fromkeys((usual, *sooner)))
        if last > s.max_iterations:
            last, stops = s.max_iterations, (*stops, "max_iterations")
        if executions is None:
            # A failing call's first run may be retried in place; with the circuit, later runs of a tool whose
            # last call failed are not.
            reached = last if runs is None else min(runs, last)
            executions = s.tool_attempts + reached - 1 if self.circuit else s.tool_attempts * reached
        return self._made(runaway, stops, last, per_round, executions)

    def _made(
        self, runaway: Runaway, stops: tuple[str, ...], rounds: int, per_round: int, executions: int | None
    ) -> Bound:
        s = self.settings
        executions = self.tool_budget if executions is None else min(executions, self.tool_budget)
        decisions = rounds * per_round
        # At most one fold a round, and one pick of the run's tools before the first (`max_tools`).
        model_calls = decisions + rounds + (s.max_tools is not None)
        if s.max_reply_tokens is None or self.budget is None:
            return Bound(runaway, stops, rounds, decisions, executions, model_calls, None)
        per_call = self.budget + s.max_reply_tokens
        tokens = model_calls * per_call
        if s.run_token_budget is not None:
            # The budget is checked after each round: at most one round's calls past it.
            tokens = min(tokens, s.run_token_budget + (per_round + 1) * per_call)
        return Bound(runaway, stops, rounds, decisions, executions, model_calls, tokens)
