"""A middleware's stop (`middleware`): a LangChain middleware hook ended the run with ``jump_to: "end"``.

decide records the stop as its decision (`reinloop.middleware`: ModelCallLimitMiddleware's limit, a hook of
your own); this guard, first in the table, ends the run in that round, with the hook's message as the final one.
"""

from __future__ import annotations

from reinloop.guards.base import Guard, Stop
from reinloop.state import RunState

__all__ = ["MiddlewareStop"]


class MiddlewareStop(Guard):
    name = "middleware"
    exit_code = 9

    def check(self, state: RunState) -> Stop | None:
        decision = state["decision"]
        if decision["kind"] != "stop":
            return None
        return Stop(decision.get("stop") or "Stopped by a middleware.")
