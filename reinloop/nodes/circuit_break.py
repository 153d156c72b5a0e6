"""circuit_break: end a run that a guard stopped, gracefully and resumably.

Reads `finish_reason` and what the guard that stopped the run reads. Writes `messages`: one explanatory final
message naming the reason, what led to it, and how to resume (the message of the guard's `Stop`;
the explanation alone also in its `response_metadata`, under `EXPLANATION_KEY`); and clears a pending
`reflection`. The checkpoint keeps everything else, so `reinloop.resume` can continue the thread with a fresh
budget.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from reinloop.context import AgentContext
from reinloop.errors import InvariantError
from reinloop.guards import Stop
from reinloop.state import RunState

__all__ = ["EXPLANATION_KEY", "RESUME_ADVICE", "circuit_break"]

RESUME_ADVICE = (
    " The state is saved: resume this thread with reinloop.resume(agent, config, extra_iterations=..., "
    "hint=...) to continue with a fresh budget."
)
# Where the final message keeps its explanation without RESUME_ADVICE (`response_metadata`, which no chat
# model is sent): for a front end that says how to resume in its own terms, as the `reinloop` command does.
EXPLANATION_KEY = "reinloop_explanation"


def circuit_break(state: RunState, ctx: AgentContext) -> dict[str, Any]:
    reason = state["finish_reason"]
    guard = next((guard for guard in ctx.guards if reason is not None and guard.name == reason), None)
    if guard is None:
        raise InvariantError(
            f"circuit_break reached with finish_reason={reason!r}, which no guard in use ends runs with"
        )
    # The guard's verdict again, on the state it stopped: its check depends on state alone.
    stop = guard.check(state)
    text = stop.message if isinstance(stop, Stop) else f"Stopped by the guard {reason!r}."
    final = AIMessage(text + RESUME_ADVICE, name="circuit_break", response_metadata={EXPLANATION_KEY: text})
    # A reflection turn the run did not get to take is not for the next run's first decision.
    return {"messages": [final], "reflection": None}
