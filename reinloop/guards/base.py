"""The guard interface: three hooks, settings in the constructor, state declared with the guard.

`judge(calls, state)` in validate_args (the round's checked calls, returned, refused with `refuse` or given
fewer `attempts`), `observe(round, state)` in observe (the guard's state changes), `check(state)` in
check_finish (`Stop(message)`, `Note(text)` or None). A guard whose `check` may stop a run sets `exit_code`;
its keys are a TypedDict, `state_schema`, saved with the thread, and `initial` their values for a fresh
budget. Hooks read state only, so a resumed run keeps what a guard knows; `check` is asked again for the final
message, so it depends on state alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from reinloop.errors import ConfigurationError
from reinloop.state import AgentState, CallCheck, ErrorKind, RunState, ToolOutcome

__all__ = ["QUOTE_CHARS", "CallResult", "Guard", "Note", "Round", "Stop", "at_least", "called", "refuse"]

# What a final message quotes (an error, a call) is cut to this length.
QUOTE_CHARS = 300


@dataclass(frozen=True, slots=True)
class CallResult:
    """One requested call of a round and what became of it, as the model is told."""

    check: CallCheck
    outcome: ToolOutcome | None  # its run's outcome; None: it did not run (rejected, refused, from cache)
    content: str  # the observation the model is sent
    error_kind: ErrorKind | None  # None: a success, or an answer from cache

    @property
    def ran_ok(self) -> bool:
        """The tool ran and succeeded (an answer from cache is not a run)."""
        return self.outcome is not None and self.error_kind is None


@dataclass(frozen=True, slots=True)
class Round:
    """What a round came to, for `observe`: the reply's parse error, or its calls."""

    parse_error: str | None = None  # the reply could not be read (and its retries were used up)
    # The round's replies that could not be read, its parse retries' included (all of them with parse_error).
    unreadable: int = 0
    calls: tuple[CallResult, ...] = ()
    # Every outcome written this round, retried calls with their attempts.
    outcomes: tuple[ToolOutcome, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Stop:
    """`check`'s verdict that ends the run. With `replan` (what went wrong, for the model), a re-plan turn
    listing `failed` may replace the stop while the run's `max_replans` allow."""

    message: str
    replan: str | None = None
    failed: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Note:
    """`check`'s verdict that lets the run go on with `text` shown to the next decision and `update` written,
    unless another guard stops the run."""

    text: str
    update: Mapping[str, Any] = field(default_factory=dict)


class Guard:
    """Base class of every guard: each hook does nothing until a subclass overrides it.

    `name` is unique among the guards in use (a guard with a built-in one's name replaces it) and is the finish
    reason of the runs it stops; a guard that overrides `check` needs `exit_code` (not 0, 1, 2, 75 or 130).
    """

    name: ClassVar[str] = ""
    exit_code: ClassVar[int | None] = None
    state_schema: ClassVar[type[Any] | None] = None
    initial: ClassVar[Mapping[str, Any]] = {}

    def judge(self, calls: list[CallCheck], state: AgentState) -> list[CallCheck]:
        return calls

    def observe(self, round: Round, state: AgentState) -> dict[str, Any]:
        return {}

    def check(self, state: RunState) -> Stop | Note | None:
        return None

    @property
    def stops(self) -> bool:
        """Whether it may end runs: it has a `check` of its own."""
        return type(self).check is not Guard.check

    def __repr__(self) -> str:
        return f"<guard {self.name}>"


def refuse(call: CallCheck, message: str, kind: ErrorKind = "rejected") -> CallCheck:
    """`call` refused: it does not run, and the model is sent `message` as its result (an error)."""
    return {**call, "error_kind": kind, "error": message, "attempts": 0}


def called(check: CallCheck) -> str:
    """A call as the model wrote it, `name({arguments})`; default=str: a rejected call's arguments are as sent."""
    return f"{check['name']}({json.dumps(check['args'], ensure_ascii=False, default=str)})"


def at_least(guard: str, **values: tuple[int, int]) -> None:
    """Raises `ConfigurationError` for a setting under its least value: ``at_least("x", window=(0, 1))``."""
    low = {name: least for name, (value, least) in values.items() if value < least}
    if low:
        wanted = ", ".join(f"{name} >= {least}" for name, least in low.items())
        given = ", ".join(f"{name}={values[name][0]}" for name in low)
        raise ConfigurationError(f"{guard} needs {wanted}, got {given}")
