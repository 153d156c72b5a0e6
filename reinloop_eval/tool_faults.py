"""The tool faults: the evaluation's tools wrapped so that a call, by its seeded draw, raises an exception,
hangs (waited out in simulated time, or past the agent's tool timeout until its run ends) or returns an empty
result; the timer waits on the run's simulated clock. With the costly faults, a non-idempotent tool's exception
may come after its effect, and the wrappers take arguments as the agent passes them (`UncheckedTool`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from reinloop.tools.clock import TimerTool
from reinloop.tools.registry import POLICY_KEY
from reinloop_eval.faults import COSTLY_FAULTS, FaultProfile, lost_reply_draw, tool_draws
from reinloop_eval.meters import SimulatedClock, ToolStats

__all__ = ["HANG_LIMIT_S", "TOOL_FAULTS", "UncheckedTool", "faulty_tools"]

# The longest a hung call blocks its thread if its run never releases it (a safety net: runs release it).
HANG_LIMIT_S = 600.0


def faulty_tools(
    tools: Sequence[BaseTool],
    profile: FaultProfile,
    seed: int,
    stats: ToolStats,
    *,
    handle_errors: bool = False,
    clock: SimulatedClock | None = None,
    timeout_s: float | None = None,
) -> list[BaseTool]:
    """The tools with seeded faults injected: exceptions (a backend that failed, which another attempt may
    fix), slow calls, empty results.

    A slow call hangs `profile.slow_s` simulated seconds on `clock`: an agent whose tool timeout `timeout_s`
    is shorter finds it hanging until the clock is released (its run ended), any other waits it out at once.
    The timer waits on `clock` too, if one is given. `handle_errors`: the tools handle their own errors, as a
    LangChain tool with `handle_tool_error=True` does: any exception is raised as a `ToolException`, which the
    tool turns into an error observation. With `profile.costly`, the costly faults of `COSTLY_FAULTS`: an
    exception of a non-idempotent tool may come after its effect (a lost reply), and the wrappers hand the
    tools the arguments as the agent passed them (`UncheckedTool`).
    """
    if clock is not None:  # with no clock (a real model's run) the timer waits in real time
        for tool in tools:
            if isinstance(tool, TimerTool):
                tool.sleep = clock.advance
    clock = clock or SimulatedClock()

    def wrap(tool: BaseTool) -> BaseTool:
        def run(**kwargs: Any) -> Any:
            index = stats.executed  # the n-th call of the run, whichever agent made it
            fault = _tool_fault(profile, seed, index)
            stats.executed += 1
            if fault == "exception":
                if _lost_reply(tool.name, profile, seed, index):
                    tool.invoke(kwargs)  # the effect is made; its reply never arrives
                raise ConnectionError(f"{tool.name} failed: simulated internal error")
            if fault == "empty":
                return ""
            result = tool.invoke(kwargs)
            stats.succeeded += 1
            if fault == "slow":
                # The work is done before the hang, so what a run did is known when it ends, even when an
                # agent stopped waiting and left the call running.
                _hang(clock, profile.slow_s, timeout_s)
            return result

        # The tool's run policy but its isolation: what reinloop may retry or answer from cache stays as with
        # the tool itself, while the wrapper, whose draws and counts live here, runs in this process.
        policy = {k: v for k, v in ((tool.metadata or {}).get(POLICY_KEY) or {}).items() if k != "isolation"}
        unchecked = profile.costly and COSTLY_FAULTS.invalid_args_reach_tools
        return (UncheckedTool if unchecked else StructuredTool).from_function(
            func=_handled(run) if handle_errors else run,
            handle_tool_error=handle_errors,
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            metadata={POLICY_KEY: policy},
        )

    return [wrap(tool) for tool in tools]


TOOL_FAULTS = ("exception", "slow", "empty")


class UncheckedTool(StructuredTool):
    """A tool that takes its arguments as they come: its schema is what the model is shown (and what reinloop
    validates against before any call runs), never checked at the call."""

    def _parse_input(self, tool_input: str | dict[str, Any], tool_call_id: str | None) -> str | dict[str, Any]:
        if isinstance(tool_input, dict):
            return dict(tool_input)
        return super()._parse_input(tool_input, tool_call_id)


def _tool_fault(profile: FaultProfile, seed: int, index: int) -> str | None:
    hit, which = tool_draws(seed, index)
    return TOOL_FAULTS[int(which * len(TOOL_FAULTS))] if hit < profile.tool_fault_rate else None


def _lost_reply(name: str, profile: FaultProfile, seed: int, index: int) -> bool:
    """Whether an injected exception of tool call `index` comes after the tool's effect: for a non-idempotent
    tool, with the costly faults on, by a draw of its own."""
    if not profile.costly or name not in COSTLY_FAULTS.non_idempotent_tools:
        return False
    return lost_reply_draw(seed, index) < COSTLY_FAULTS.lost_reply_share


def _hang(clock: SimulatedClock, hang_s: float, timeout_s: float | None) -> None:
    """A slow call's hang: waited out in simulated time, or, past the agent's timeout, until the run ends."""
    if timeout_s is not None and hang_s > timeout_s:
        clock.advance(timeout_s)  # the agent gives up at its timeout
        clock.released.wait(HANG_LIMIT_S)
    else:
        clock.advance(hang_s)


def _handled(run: Callable[..., Any]) -> Callable[..., Any]:
    """`run`, its exceptions raised as a `ToolException` (what a tool with handle_tool_error=True reports)."""

    def handled(**kwargs: Any) -> Any:
        try:
            return run(**kwargs)
        except ToolException:
            raise
        except Exception as exc:
            raise ToolException(f"Error: {type(exc).__name__}: {exc}") from exc

    return handled
