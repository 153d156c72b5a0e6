"""The guard interface: one guard owns its state keys, its settings, its hooks at the phases and its finish reason.

A guard is a `Guard` object given to `build_agent` (the built-in ones by default, `reinloop.guards`). The nodes
call every guard in use at the same places, in table order:

- `judge` (validate_args): the round's checked calls, before any runs; a guard may refuse a call (an
  `error_kind` and the feedback the model is sent) or change how it runs (its `attempts`);
- `observe` (observe): what became of each call of the round, or the reply that could not be read; returns
  the guard's state changes;
- `trips` (check_finish): whether the guard ends the run, with its `reason`, its final message (`message`,
  `template` filled with `fields`) and the CLI's `exit_code`; a guard with `replan` may get a re-plan turn
  instead (`AgentConfig.max_replans`, one budget for the run), which changes what the model is told, never
  what the guards know; when the run goes on, `going_on` may set a turn of its own (the error streak's
  reflection);
- `fresh`: the values of its keys for a fresh budget (a new task on a finished thread, a resume after a break).

A guard's keys are declared by its `state_schema`, a TypedDict merged into the agent's state schema (as
LangChain middleware's state schemas are); the built-in guards' keys are `AgentState`'s own, so saved threads
and the output schema stay as they were. Its settings are its constructor's (a built-in guard reads the
`AgentConfig` fields it always had). Guards are stateless objects: everything they know is in state, so a
resumed run keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from reinloop.state import NO_USAGE, AgentState, CallCheck, ErrorKind, RunState, ToolOutcome
from reinloop.text import counted

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["QUOTE_CHARS", "Guard", "Round", "Seen", "called", "common_fields"]

# What a final message quotes (an error, a call) is cut to this length.
QUOTE_CHARS = 300


@dataclass(frozen=True, slots=True)
class Seen:
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
    """What a round came to, for the guards' `observe`: the reply's parse error, or its calls."""

    parse_error: str | None = None  # the reply could not be read (and its retries were used up)
    # The round's replies that could not be read, its parse retries' included (all of them with parse_error).
    unreadable: int = 0
    calls: tuple[Seen, ...] = ()
    # Every outcome written this round, retried calls with their attempts.
    outcomes: tuple[ToolOutcome, ...] = field(default=())


class Guard:
    """Base class of every guard: each hook does nothing until a subclass overrides it.

    Set `name` (unique among the guards in use; a guard given to `build_agent` with a built-in guard's name
    replaces it), and for a guard that ends runs `reason` (its finish reason, also unique), `exit_code`
    (the `reinloop` command's exit status: not 0, 1, 2, 75 or 130) and `template` (the final message; it may use
    `common_fields` and the guard's own `fields`).
    """

    name: ClassVar[str] = ""
    reason: ClassVar[str | None] = None
    exit_code: ClassVar[int | None] = None
    template: ClassVar[str | None] = None
    # What a re-plan turn says happened when it replaces this guard's stop; None: this stop is never replaced.
    replan: ClassVar[str | None] = None
    # A TypedDict of the keys this guard keeps in state (total=False); None: none of its own.
    state_schema: ClassVar[type[Any] | None] = None

    @property
    def fresh(self) -> Mapping[str, Any]:
        """Its keys' values for a fresh budget: a new task on a finished thread, a resume after a break."""
        return {}

    def judge(self, checks: list[CallCheck], state: AgentState, ctx: AgentContext) -> list[CallCheck]:
        """The round's checked calls as this guard decides, before any runs (validate_args)."""
        return checks

    def observe(self, state: AgentState, round: Round, ctx: AgentContext) -> dict[str, Any]:
        """Its state changes after the round's calls came back (observe)."""
        return {}

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        """Whether it ends the run, in the state after check_finish counted the round."""
        return False

    def fields(self, state: AgentState, ctx: AgentContext) -> dict[str, Any]:
        """Its own placeholders in `template`, beside `common_fields`."""
        return {}

    def message(self, state: AgentState, ctx: AgentContext) -> str:
        """The final message of a run it ended (circuit_break)."""
        if self.template is None:
            raise NotImplementedError(f"guard {self.name!r} ends runs but has no template or message()")
        return self.template.format(**common_fields(state, ctx), **self.fields(state, ctx))

    def failed_attempts(self, state: AgentState, ctx: AgentContext) -> list[str]:
        """What kept failing, one line each, for the re-plan turn that replaces its stop."""
        return []

    def going_on(self, state: RunState, ctx: AgentContext) -> dict[str, Any]:
        """Its state changes when check_finish lets the run go on without a re-plan turn."""
        return {}

    def __repr__(self) -> str:
        return f"<guard {self.name}>"


def common_fields(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    """The placeholders every guard's template may use: {iteration}, {rounds} ("3 rounds"), {tokens}."""
    iteration = state.get("iteration", 0)
    return {
        "iteration": iteration,
        "rounds": counted(iteration, "round"),
        "tokens": state.get("usage", NO_USAGE)["total_tokens"],
    }


def called(check: CallCheck) -> str:
    """A call as the model wrote it, `name({arguments})`; default=str: a rejected call's arguments are as sent."""
    return f"{check['name']}({json.dumps(check['args'], ensure_ascii=False, default=str)})"
