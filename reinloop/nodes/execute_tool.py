"""execute_tool: run one validated call, with a hard timeout, in-place retries and a result check.

Runs once per valid call (a LangGraph `Send` task each), so every finished call is checkpointed on its own
and a resumed thread never re-runs it. Reads the `CallCheck` it is sent (a person's edit included,
`reinloop.approvals`), and fills in the tool's injected arguments (`reinloop.tools.injection`). Writes one
`ToolOutcome` to `tool_results`, with the attempts made and its text cut to `observation_max_chars`, and the
keys of a tool's accepted `Command` (`reinloop.tools.commands`). Outcomes: a result, or an error observation
(an exception, a timeout, an empty or unshowable result, a refused Command, a call in doubt); only LangGraph
control flow and an interrupt of the caller's own thread (Ctrl-C) leave the node.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.runnables import RunnableConfig

from reinloop._langgraph import CONFIG_KEY_RESUMING, CONFIG_KEY_SCRATCHPAD
from reinloop.approvals import EDITED_NOTE
from reinloop.context import AgentContext
from reinloop.drivers import Steps, adrive, drive
from reinloop.state import CallCheck, ErrorKind, InDoubtCall, ToolOutcome
from reinloop.storable import args_problem, clean_text, clean_value
from reinloop.text import truncate
from reinloop.tools.commands import settle_command
from reinloop.tools.effects import IDEMPOTENCY_KEY
from reinloop.tools.execution import ToolRun
from reinloop.tools.injection import inject
from reinloop.tools.retry import Backoff, retry_steps

__all__ = [
    "ATTEMPTS_NOTE",
    "EMPTY_RESULT_TEMPLATE",
    "IN_DOUBT_LOST",
    "IN_DOUBT_TEMPLATE",
    "IN_DOUBT_TIMEOUT",
    "MAX_ARTIFACT_CHARS",
    "TIMEOUT_TEMPLATE",
    "TOOL_ERROR_TEMPLATE",
    "UNKNOWN_OUTCOME_TEMPLATE",
    "aexecute_tool",
    "execute_tool",
]

TOOL_ERROR_TEMPLATE = "Error: {name!r} failed{tries}: {error}. Change the arguments or the tool."
TIMEOUT_TEMPLATE = "Error: {name!r} gave no result within {timeout:g} s{tries}. Try a smaller request or another tool."
EMPTY_RESULT_TEMPLATE = "Error: {name!r} returned no usable result{tries}: {reason}. Change the arguments or the tool."
# Fills {tries} above when the call was retried; empty after a single attempt.
ATTEMPTS_NOTE = " ({attempts} attempts)"
# A timeout or a lost connection of a tool not declared safe to repeat, which is run only once: {failure} is
# one of the two below.
IN_DOUBT_TEMPLATE = (
    "Error: {name!r} {failure}, so this call may or may not have had its effect. {name!r} is not declared safe "
    "to repeat, so it was not run again: check whether it took effect (with a read-only tool, or ask the user) "
    "before calling it again."
)
IN_DOUBT_TIMEOUT = "gave no result within {timeout:g} s"
IN_DOUBT_LOST = "failed without an answer: {error}"

# An artifact larger than this (as JSON) is not saved with the run: it would be in every later checkpoint.
MAX_ARTIFACT_CHARS = 64_000

UNKNOWN_OUTCOME_TEMPLATE = (
    "Error: the outcome of this {name!r} call is unknown: the process running it stopped before its result "
    "was saved, and {name!r} is not safe to run twice, so it was not run again. It may or may not have taken "
    "effect: check with a read-only tool, or tell the user, before calling it again."
)


def execute_tool(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    return drive(_execute_tool(check, ctx, config))


async def aexecute_tool(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    """`execute_tool` under ainvoke/astream: awaits the call (`arun_tool`) and its backoff on the event loop."""
    return await adrive(_execute_tool(check, ctx, config))


def _execute_tool(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> Steps[dict[str, Any]]:
    name = check["name"]
    entry = ctx.middleware.wrapped(ctx.registry[name], check["call_id"], ctx)
    if not entry.idempotent and _in_flight_at_a_crash(config):
        doubt = InDoubtCall(call_id=check["call_id"], name=name, args=check["args"], key=check["key"])
        update = _outcome(
            check, UNKNOWN_OUTCOME_TEMPLATE.format(name=name), "unknown_outcome", attempts=0, in_doubt=True
        )
        return {**update, "in_doubt": [doubt]}
    # One key for every attempt: a retry of a call that had its effect finds it, as a re-run after a crash does.
    # A plain merge: LangGraph's node config is complete, and the tool's own invoke copies what it changes
    # (`patch_config` would copy the callback manager here as well).
    config = {**config, "configurable": {**(config.get("configurable") or {}), IDEMPOTENCY_KEY: check["key"]}}
    settings = ctx.settings
    timeout = entry.timeout_s or settings.tool_timeout_s
    backoff = Backoff(settings.tool_backoff_s, settings.tool_backoff_max_s)
    # A check saved by a version without attempts runs once.
    attempts = check.get("attempts", 1)
    args = _call_args(check, ctx, config)
    run, made = yield from retry_steps(entry, args, timeout, config, attempts=attempts, backoff=backoff)
    written: dict[str, Any] = {}
    if run.command is not None:
        run, written = settle_command(run.command, check["call_id"], ctx.tool_keys, entry.check_result)
    in_doubt = run.effect_unknown and not entry.retryable
    if in_doubt:
        content = _in_doubt(run, name, timeout, settings.observation_max_chars)
    else:
        content = _content(run, name, timeout, made, settings.observation_max_chars)
    if check.get("review") == "edited":
        # The model's message still holds the call it made; the result must say it is not that call's.
        content = EDITED_NOTE.format(args=json.dumps(check["args"], ensure_ascii=False)) + content
    # An identical call is refused after this one only when the tool is declared unsafe to repeat: one that
    # declares nothing is not retried in place, but the model may call it again.
    refuse_repeat = in_doubt and not entry.idempotent
    outcome = _outcome(check, content, run.error_kind, attempts=made, artifact=run.artifact, in_doubt=refuse_repeat)
    return {**outcome, **written}


def _in_flight_at_a_crash(config: RunnableConfig) -> bool:
    """Whether this task was left to run by a saved thread that continues, and not because its tool stopped
    it with `interrupt()` and now has the answer (LangGraph runs such a task again from its start, as it
    should: the tool asked to be run again)."""
    configurable = config.get("configurable") or {}
    # LangGraph sets the resuming flag for the first step of a run that continues a saved thread: the tasks
    # of that step are the ones the saved checkpoint had left to run (in flight at a crash). An approval's
    # resume continues a saved thread too, but at validate_args, where approvals wait, so execute_tool never
    # runs in its first step (`reinloop.approvals`). The task's scratchpad holds the answers to its own
    # `interrupt()` calls when a run continues with `Command(resume=...)`.
    if not configurable.get(CONFIG_KEY_RESUMING):
        return False
    scratchpad = configurable.get(CONFIG_KEY_SCRATCHPAD)
    answered = scratchpad is not None and (bool(scratchpad.resume) or scratchpad.get_null_resume(False) is not None)
    return not answered


def _call_args(check: CallCheck, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    """The model's arguments, or for a tool with injected arguments the ToolCall that carries them too."""
    entry = ctx.registry[check["name"]]
    if not entry.injection.needed:
        if entry.tool.response_format == "content_and_artifact":
            return {"type": "tool_call", "name": check["name"], "args": check["args"], "id": check["call_id"]}
        return check["args"]
    return inject(
        entry.tool, entry.injection, check["args"], check["call_id"], config, ctx.state_keys, ctx.registry.tools
    )


def _content(run: ToolRun, name: str, timeout: float, attempts: int, max_chars: int) -> str:
    """The observation of `run`: the tool's text, or the feedback for its error."""
    # The one cut of tool output; reinloop's own feedback around it is kept whole.
    text = clean_text(truncate(run.text, max_chars))
    tries = ATTEMPTS_NOTE.format(attempts=attempts) if attempts > 1 else ""
    if run.error_kind is None:
        return text
    if run.error_kind == "timeout":
        return TIMEOUT_TEMPLATE.format(name=name, timeout=timeout, tries=tries)
    if run.error_kind == "empty_result":
        return EMPTY_RESULT_TEMPLATE.format(name=name, reason=text, tries=tries)
    return TOOL_ERROR_TEMPLATE.format(name=name, error=text, tries=tries)


def _in_doubt(run: ToolRun, name: str, timeout: float, max_chars: int) -> str:
    """The observation of a call of a tool not declared safe to repeat that gave no answer: it may have acted."""
    if run.error_kind == "timeout":
        failure = IN_DOUBT_TIMEOUT.format(timeout=timeout)
    else:
        failure = IN_DOUBT_LOST.format(error=clean_text(truncate(run.text, max_chars)))
    return IN_DOUBT_TEMPLATE.format(name=name, failure=failure)


def _outcome(
    check: CallCheck,
    content: str,
    error_kind: ErrorKind | None,
    attempts: int,
    artifact: Any = None,
    in_doubt: bool = False,
) -> dict[str, Any]:
    outcome = ToolOutcome(
        call_id=check["call_id"], name=check["name"], content=content, error_kind=error_kind, attempts=attempts
    )
    if in_doubt:
        outcome["in_doubt"] = True
    if artifact is not None and args_problem(artifact, MAX_ARTIFACT_CHARS) is None:
        outcome["artifact"] = clean_value(artifact)
    return {"tool_results": [outcome]}
