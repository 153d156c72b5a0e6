"""circuit_break: end a run that tripped a breaker, gracefully and resumably.

Reads `finish_reason` and the counters. Writes `messages`: one explanatory final message naming the reason,
what led to it, and how to resume (the reason's template in `reinloop.breakers`, filled in here; the
explanation alone also in its `response_metadata`, under `EXPLANATION_KEY`); and clears a pending
`reflection`. The checkpoint keeps everything else, so `reinloop.resume` can continue the thread with a fresh
budget.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from reinloop.breakers import breaker, tool_attempt_limit
from reinloop.config import round_steps
from reinloop.context import AgentContext
from reinloop.errors import InvariantError
from reinloop.repeats import horizon
from reinloop.state import NO_USAGE, AgentState, CallCheck
from reinloop.text import counted, truncate

__all__ = ["EXPLANATION_KEY", "RESUME_ADVICE", "circuit_break"]

RESUME_ADVICE = (
    " The state is saved: resume this thread with reinloop.resume(agent, config, extra_iterations=..., "
    "hint=...) to continue with a fresh budget."
)
# Where the final message keeps its explanation without RESUME_ADVICE (`response_metadata`, which no chat
# model is sent): for a front end that says how to resume in its own terms, as the `reinloop` command does.
EXPLANATION_KEY = "reinloop_explanation"
# Error texts quoted in the final message are cut to this length.
QUOTE_CHARS = 300


def circuit_break(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    reason = state["finish_reason"]
    template = breaker(reason).template if reason is not None else None
    if template is None:
        raise InvariantError(f"circuit_break reached with finish_reason={reason!r}")
    settings = ctx.settings
    iteration, errors = state.get("iteration", 0), state.get("consecutive_errors", 0)
    tool_attempts = state.get("tool_attempts", 0)
    text = template.format(
        iteration=iteration,
        rounds=counted(iteration, "round"),
        tokens=state.get("usage", NO_USAGE)["total_tokens"],
        budget=settings.run_token_budget,
        errors=errors,
        error_count=counted(errors, "error"),
        threshold=settings.error_threshold,
        last_error=_last_error(state),
        max_repeats=settings.max_repeats,
        loop_window=settings.loop_window,
        tool_attempts=tool_attempts,
        tool_calls=counted(tool_attempts, "tool call"),
        max_tool_attempts=tool_attempt_limit(state, settings),
        repeats_after_feedback=settings.repeats_after_feedback,
        times_after_feedback=counted(settings.repeats_after_feedback, "time"),
        repeats_after_cache=settings.repeats_after_cache,
        times_after_cache=counted(settings.repeats_after_cache, "time"),
        horizon=horizon(settings),
        round_steps=round_steps(settings.max_parse_retries),
        repeats="Calls of the same tool" if settings.loop_key == "tool" else "The same call",
        repeated=", ".join(
            _call_text(check) for check in state.get("checks", []) if check["error_kind"] == "repeat_after_feedback"
        ),
    )
    final = AIMessage(text + RESUME_ADVICE, name="circuit_break", response_metadata={EXPLANATION_KEY: text})
    # A reflection turn the run did not get to take is not for the next run's first decision.
    return {"messages": [final], "reflection": None}


def _call_text(check: CallCheck) -> str:
    """A call as the model wrote it, `name({arguments})`, cut to a quotable length."""
    return truncate(f"{check['name']}({json.dumps(check['args'], ensure_ascii=False, default=str)})", QUOTE_CHARS)


def _last_error(state: AgentState) -> str:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, ToolMessage) and message.status == "error":
            return truncate(message.text, QUOTE_CHARS)
        if not isinstance(message, ToolMessage) and message.text.startswith("Error:"):
            return truncate(message.text, QUOTE_CHARS)
    return "(none recorded)"
