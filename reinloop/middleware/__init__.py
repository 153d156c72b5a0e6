"""LangChain middleware inside the six nodes: what is written for `create_agent` runs in reinloop too.

`build_agent(..., middleware=[...])` takes LangChain `AgentMiddleware` objects (the shipped ones, your
subclasses, the decorator forms) and runs each hook at its place inside the nodes, in create_agent's order;
the diagram gains no node. `before_agent` and the model hooks run in decide (`turn`, `model_call`),
`wrap_tool_call` around each attempt of a call in execute_tool (`tool_call`), `after_agent` in check_finish
when the run ends; `hooks` says which middleware have each hook. A hook sees the state as create_agent's loop
holds it (the task as the first HumanMessage, then the window), and its changes to them are saved;
`jump_to: "end"` ends the run as `middleware`.
"""

from reinloop.middleware.hooks import (
    MAX_MODEL_JUMPS,
    NO_MIDDLEWARE,
    TASK_MESSAGE_ID,
    UNUSED_KEYS,
    Middleware,
)
from reinloop.middleware.turn import ModelTurn, current_runtime, model_turn, rewritten

__all__ = [
    "MAX_MODEL_JUMPS",
    "NO_MIDDLEWARE",
    "TASK_MESSAGE_ID",
    "UNUSED_KEYS",
    "Middleware",
    "ModelTurn",
    "current_runtime",
    "model_turn",
    "rewritten",
]
