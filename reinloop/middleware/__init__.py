"""LangChain middleware inside the six nodes: what is written for `create_agent` runs in reinloop too.

`build_agent(..., middleware=[...])` takes LangChain `AgentMiddleware` objects (the shipped ones, your
subclasses, and the decorator forms: `@before_model`, `@wrap_model_call`, `@wrap_tool_call`,
`@dynamic_prompt`, ...) and runs each hook at its place inside the nodes; the diagram gains no node.

- `before_agent`: in decide, at the start of a run (a thread's first task, or a new task on it), in list order.
- `before_model`, `wrap_model_call`, `after_model`: in decide, around its model call, as create_agent orders
  them: `before_model` in list order, the first `wrap_model_call` outermost, `after_model` in reverse order.
- `wrap_tool_call`: in execute_tool, around each run of a validated call (each in-place attempt), inside
  reinloop's timeout, in the call's thread (not for a tool with isolation="process", whose run is in a
  worker process); the handler raises what the tool raised, as LangChain's ToolNode does.
- `after_agent`: in check_finish, when the run ends (answered, or stopped), in reverse order.
- `state_schema`: its keys join the agent's state (`messages` stays reinloop's window, and create_agent's
  `jump_to` and `structured_response` are not used); `tools`: added to the agent's tools, validated and guarded
  like any other. Sync hooks run under ainvoke too; an async-only hook needs ainvoke.
- `jump_to`: "end" from `before_agent`, `before_model` or `after_model` ends the run with finish reason
  `middleware` (exit code 9), the hook's message (the last AI message it added) as the run's final message;
  "model" from `after_model` asks the model again (at most `MAX_MODEL_JUMPS` times in one decision); "tools"
  is the way a decision goes anyway.

What a hook sees as `state`: the agent's state, with `messages` as create_agent's loop would hold them, the task
as the first HumanMessage and then the window. A hook that changes the task message changes the task (so
PIIMiddleware redacts it in the saved state, as create_agent's state would hold it); one that changes the
window (replacing messages by id, or removing them all and writing new ones, as SummarizationMiddleware does)
replaces it. A ToolMessage an `after_model` hook adds for a call of the reply answers that call: the call does
not run, and the hook's message is its observation (`blocked`; ToolCallLimitMiddleware's "continue").
HumanInTheLoopMiddleware is refused: reinloop's own approvals (`approve=`) interrupt after the reply is saved,
where an interrupt inside decide would call the model again on resume.
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
