"""A middleware's stop (`middleware`): a LangChain middleware hook ended the run with ``jump_to: "end"``.

decide records the stop as its decision (`reinloop.middleware`: ModelCallLimitMiddleware's limit, a hook of
your own); this guard, first in the table, ends the run in that round, with the hook's message as the final one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reinloop.guards.base import Guard
from reinloop.state import AgentState, RunState

if TYPE_CHECKING:
    from reinloop.context import AgentContext

__all__ = ["MiddlewareStop"]


class MiddlewareStop(Guard):
    name = reason = "middleware"
    exit_code = 9

    def trips(self, state: RunState, ctx: AgentContext) -> bool:
        return state["decision"]["kind"] == "stop"

    def message(self, state: AgentState, ctx: AgentContext) -> str:
        return state["decision"].get("stop") or "Stopped by a middleware."
