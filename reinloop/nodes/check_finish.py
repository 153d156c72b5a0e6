"""check_finish: count the round and decide whether the run goes on.

Reads `iteration`, `iterations_left`, `decision`, `replans` and what the guards read (`reinloop.guards`;
LangGraph's `remaining_steps` among it). Writes `iteration`, `iterations_left` (left as it was when answered),
`finish_reason` and `final_answer` (None unless answered), and for a re-plan turn `reflection` and `replans`,
or what the guards' notes set. Outcomes: answered; else the first guard in table order whose check stops the
run (dead_loop, error_streak, token_budget, max_tool_attempts, your own, max_iterations, step_limit), a stop
with a `replan` replaced by one re-plan turn while `max_replans` allow; else the run goes on (`finish_reason`
None). When the run ends, the middleware's after_agent hooks run (`reinloop.middleware`).
"""

from __future__ import annotations

from typing import Any, cast

from reinloop.context import AgentContext
from reinloop.drivers import Steps, adrive, drive
from reinloop.guards import Note, Stop
from reinloop.guards.error_streak import listed
from reinloop.middleware import current_runtime
from reinloop.state import RunState

__all__ = ["REPLAN_TEMPLATE", "acheck_finish", "check_finish"]

REPLAN_TEMPLATE = (
    "Re-plan ({replan} of {replans}): {what}\n{errors}\nThose attempts will not work. Make a new plan from what "
    "you know: use another tool or other arguments, or answer. {left}"
)


def check_finish(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    return drive(_ended(state, _check_finish(state, ctx), ctx))


async def acheck_finish(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    """`check_finish` under ainvoke/astream: awaits the middleware's async after_agent hooks."""
    return await adrive(_ended(state, _check_finish(state, ctx), ctx))


def _ended(state: RunState, update: dict[str, Any], ctx: AgentContext) -> Steps[dict[str, Any]]:
    """`update`, with what the middleware's after_agent hooks write when the run ends (`reinloop.middleware`)."""
    if update.get("finish_reason") is None or not ctx.middleware.with_hook("after_agent"):
        return update
    written = yield from ctx.middleware.after_agent({**state, **update}, current_runtime())
    return {**update, **written}


def _check_finish(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    left = state.get("iterations_left")
    counted: dict[str, Any] = {
        "iteration": state.get("iteration", 0) + 1,
        "iterations_left": (ctx.settings.max_iterations if left is None else left) - 1,
    }
    if state["decision"]["kind"] == "answer":
        return {
            "iteration": counted["iteration"],
            "final_answer": state["decision"]["answer"],
            "finish_reason": "answered",
        }
    after = cast(RunState, {**state, **counted})
    # One re-plan turn replaces the stops of every guard with a `replan` that trips; it tells what the first of
    # them saw. A later guard (the budgets) may still end the run.
    replan: Stop | None = None
    can_replan = state.get("replans", 0) < ctx.settings.max_replans
    reason = None
    notes: list[Note] = []
    for guard in ctx.guards:
        verdict = guard.check(after)
        if isinstance(verdict, Note):
            notes.append(verdict)
        elif verdict is None:
            continue
        elif verdict.replan is not None and can_replan:
            replan = replan or verdict
        else:
            reason = guard.name
            break
    update = {**counted, "finish_reason": reason, "final_answer": None}
    if reason is None and replan is not None:
        update.update(_replan(state, replan, ctx))
    elif reason is None:
        for note in notes:
            update.update(note.update, reflection=note.text)
    return update


def _replan(state: RunState, stop: Stop, ctx: AgentContext) -> dict[str, Any]:
    """A re-plan turn in place of the `stop` guard's: the next decision is shown what kept failing. The guards
    keep what they know: an answer from cache stays one, and the stop trips again unless the next round brings
    a real tool success."""
    replan, replans = state.get("replans", 0) + 1, ctx.settings.max_replans
    more = replans - replan
    left = f"{more} more re-plan{'s are' if more > 1 else ' is'} left." if more else "If this goes on, the run stops."
    errors = listed(list(stop.failed))
    text = REPLAN_TEMPLATE.format(replan=replan, replans=replans, what=stop.replan, errors=errors, left=left)
    return {"reflection": text, "replans": replan}
