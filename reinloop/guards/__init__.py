"""The guards: one file each, every one a `Guard` (`reinloop.guards.base`), the built-in ones and yours alike.

`default_guards(settings)` are the built-in ones with `AgentConfig`'s thresholds, in the order check_finish asks
them (after an answer, which always wins) and validate_args has them judge calls: `middleware`, `dead_loop`,
`error_streak`, `tool_circuit`, `token_budget`, `max_tool_attempts`, `max_iterations`, `step_limit`.
`guard_table` puts yours among them: one with a built-in one's name replaces it, `disable(name)` drops one, any
other goes before `max_iterations` and `step_limit`, so that a guard that stops the last round names its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reinloop.config import AgentConfig
from reinloop.errors import ConfigurationError
from reinloop.guards.base import CallResult, Guard, Note, Round, Stop, refuse
from reinloop.guards.error_streak import ErrorStreak
from reinloop.guards.max_iterations import MaxIterations
from reinloop.guards.middleware_stop import MiddlewareStop
from reinloop.guards.repeats import DeadLoop
from reinloop.guards.step_limit import StepLimit, steps_to_stop
from reinloop.guards.token_budget import TokenBudget
from reinloop.guards.tool_attempts import ToolAttempts
from reinloop.guards.tool_circuit import ToolCircuit
from reinloop.state import FINISH_REASONS

__all__ = [
    "ANSWERED_EXIT_CODE",
    "BUSY_EXIT_CODE",
    "DEFAULT_GUARDS",
    "RESERVED_EXIT_CODES",
    "CallResult",
    "DeadLoop",
    "Disable",
    "ErrorStreak",
    "Guard",
    "MaxIterations",
    "MiddlewareStop",
    "Note",
    "Round",
    "StepLimit",
    "Stop",
    "TokenBudget",
    "ToolAttempts",
    "ToolCircuit",
    "default_guards",
    "disable",
    "exit_codes",
    "fresh_budgets",
    "guard_table",
    "refuse",
    "steps_to_stop",
]


def default_guards(settings: AgentConfig) -> tuple[Guard, ...]:
    """The built-in guards in table order, with `settings`' thresholds."""
    s = settings
    return (
        MiddlewareStop(),
        DeadLoop(
            s.loop_window, s.max_repeats, s.loop_key, s.repeats_after_feedback, s.repeats_after_cache, s.max_stalled
        ),
        ErrorStreak(s.error_threshold, s.error_reflection),
        ToolCircuit(),
        TokenBudget(s.run_token_budget),
        ToolAttempts(s.max_tool_attempts, s.tool_attempts, s.max_iterations),
        MaxIterations(),
        StepLimit(s.max_parse_retries),
    )


DEFAULT_GUARDS = default_guards(AgentConfig())
ANSWERED_EXIT_CODE = 0
# The `reinloop` command's own statuses: 1 a crash, 2 a usage error, 75 a thread another process runs (busy:
# sysexits' EX_TEMPFAIL, worth trying again later), 130 Ctrl-C.
BUSY_EXIT_CODE = 75
RESERVED_EXIT_CODES = frozenset({ANSWERED_EXIT_CODE, 1, 2, BUSY_EXIT_CODE, 130})
# User guards go before these.
_LAST = ("max_iterations", "step_limit")


@dataclass(frozen=True, slots=True)
class Disable:
    """Drops the guard of this name from the table (`disable`)."""

    name: str


def disable(name: str) -> Disable:
    """For `build_agent(guards=[...])`: the built-in guard `name` is not used (e.g. ``disable("tool_circuit")``)."""
    return Disable(name)


def guard_table(guards: Iterable[Guard | Disable] = (), base: Iterable[Guard] = DEFAULT_GUARDS) -> tuple[Guard, ...]:
    """`base` with `guards` put in: replacing a guard of the same name, dropping the disabled, the rest added
    before the last budget guards. Raises `ConfigurationError` for a clash or an unknown name."""
    table = list(base)
    names = [guard.name for guard in table]
    added: list[Guard] = []
    for guard in guards:
        if isinstance(guard, Disable):
            if guard.name not in names:
                raise ConfigurationError(f"disable({guard.name!r}): no such guard; the guards are {names}")
            del table[names.index(guard.name)]
            names.remove(guard.name)
        elif not isinstance(guard, Guard):
            raise ConfigurationError(f"guards must be Guard objects or disable(name), got {type(guard).__name__}")
        elif guard.name in names:
            table[names.index(guard.name)] = guard
        else:
            added.append(guard)
    at = next((index for index, guard in enumerate(table) if guard.name in _LAST), len(table))
    table[at:at] = added
    _check(table)
    return tuple(table)


def _check(table: list[Guard]) -> None:
    names = [guard.name for guard in table]
    if any(not name for name in names) or len(set(names)) != len(names):
        raise ConfigurationError(f"every guard needs a name of its own: {names}")
    if "answered" in names:
        raise ConfigurationError("'answered' is the finish reason of an answer: name the guard otherwise")
    enders = [guard for guard in table if guard.stops]
    for guard in enders:
        if guard.exit_code is None or guard.exit_code in RESERVED_EXIT_CODES or not 0 < guard.exit_code < 256:
            raise ConfigurationError(
                f"guard {guard.name!r} may stop runs (it has a check): it needs an exit_code from 3 to 255 other "
                f"than 75 and 130, got {guard.exit_code!r}"
            )
    codes = {guard.name: guard.exit_code for guard in enders}
    if len(set(codes.values())) != len(codes):
        raise ConfigurationError(f"guards need distinct exit codes: {codes}")


def exit_codes(guards: Iterable[Guard] = DEFAULT_GUARDS) -> dict[str, int]:
    """The `reinloop` command's exit status for each finish reason of `guards`."""
    codes = {"answered": ANSWERED_EXIT_CODE}
    codes.update({guard.name: guard.exit_code for guard in guards if guard.stops and guard.exit_code})
    return codes


def fresh_budgets(guards: Iterable[Guard], base: Mapping[str, Any]) -> dict[str, Any]:
    """What a fresh budget writes: `base` (the run's own counters) and every guard's `initial` values."""
    fresh = dict(base)
    for guard in guards:
        fresh.update(guard.initial)
    return fresh


def _check_built_ins() -> None:
    # A developer error in this package, caught at import rather than at the end of some run.
    built_in = ["answered", *(guard.name for guard in DEFAULT_GUARDS if guard.stops)]
    if sorted(built_in) != sorted(FINISH_REASONS):
        raise ConfigurationError(f"the built-in guards' reasons {built_in} must be FinishReason's {FINISH_REASONS}")
    _check(list(DEFAULT_GUARDS))


_check_built_ins()
