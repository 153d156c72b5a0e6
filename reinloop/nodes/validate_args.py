"""validate_args: check every requested call before anything runs.

Reads `decision`, `parse_retries`, `calls_seen`, `messages` (the thought, for a person reviewing a call) and
what the guards read. Writes `checks` (each with its idempotency key and attempts), `calls_seen`,
`parse_retries`, `unreadable_replies`, `correction`, and resets `tool_results`. Outcomes: a correction hint
for a retry of an unparsable reply; exhausted retries (observe reports the parse error); a final answer or a
middleware's stop; or one `CallCheck` per call: answered by a middleware hook (`blocked`), rejected as an
unknown tool or invalid arguments, or ready to run, then judged by each guard in table order
(`reinloop.guards`); a ready call of a tool that needs approval then waits for a person (`reinloop.approvals`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Overwrite, interrupt

from reinloop.approvals import NO_REASON, REJECTED_TEMPLATE, answer_schema, approval_request, thought_of
from reinloop.context import AgentContext
from reinloop.state import AgentState, CallCheck, Decision, ErrorKind, runs
from reinloop.text import truncate
from reinloop.tools.effects import call_key

__all__ = [
    "CLOSE_TOOL_TEMPLATE",
    "INVALID_ARGS_TEMPLATE",
    "PARSE_RETRY_TEMPLATE",
    "UNKNOWN_TOOL_TEMPLATE",
    "validate_args",
]

PARSE_RETRY_TEMPLATE = "Your reply could not be read ({error}):\n{raw}\nReply with {expected}."
UNKNOWN_TOOL_TEMPLATE = "Error: {name!r} is not a valid tool. Call one of [{available}] instead."
# The unknown name is close to one tool's (a suffix, a typo): that tool is named instead of listing them all.
# Closeness is difflib's ratio; "calculator_tool" is 0.8 from "calculator".
CLOSE_NAME_CUTOFF = 0.75
CLOSE_TOOL_TEMPLATE = "Error: {name!r} is not a valid tool. Did you mean {match!r}?"
INVALID_ARGS_TEMPLATE = "Error: invalid arguments for {name!r}: {problems}. Expected {signature}."


def validate_args(state: AgentState, ctx: AgentContext, config: RunnableConfig) -> dict[str, Any]:
    decision = state["decision"]
    update: dict[str, Any] = {"tool_results": Overwrite([]), "checks": [], "correction": None}
    retries = state.get("parse_retries", 0)
    if decision["kind"] == "unparsable":
        if retries < ctx.settings.max_parse_retries:
            update["parse_retries"] = retries + 1
            update["correction"] = _correction(decision, ctx)
        else:
            update["parse_retries"], update["unreadable_replies"] = 0, retries + 1
        return update
    # The round's earlier replies could not be read: the guards see how many (`Round.unreadable`).
    update["parse_retries"], update["unreadable_replies"] = 0, retries
    if decision["kind"] == "act":
        seen = state.get("calls_seen", 0)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        keys = [call_key(thread_id, seen + number, call["id"]) for number, call in enumerate(decision["calls"], 1)]
        blocked = decision.get("blocked") or {}
        checks = [_check_call(call, key, ctx, blocked) for call, key in zip(decision["calls"], keys, strict=True)]
        for guard in ctx.guards:
            checks = guard.judge(checks, state)
        # A call that does not run has no attempts, whatever a guard left in it.
        checks = [check if runs(check) else {**check, "attempts": 0} for check in checks]
        update["checks"] = [_reviewed(check, state, ctx) if _needs_review(check, ctx) else check for check in checks]
        update["calls_seen"] = seen + len(checks)
    return update


def _correction(decision: Decision, ctx: AgentContext) -> str:
    # decide already cut the raw reply to RAW_KEPT_CHARS.
    return PARSE_RETRY_TEMPLATE.format(
        error=decision["error"], raw=decision["raw"] or "(empty)", expected=ctx.protocol.expected_format
    )


def _needs_review(check: CallCheck, ctx: AgentContext) -> bool:
    return runs(check) and check["name"] in ctx.approvals


def _reviewed(check: CallCheck, state: AgentState, ctx: AgentContext) -> CallCheck:
    """`check` as a person decides: the run waits here (a LangGraph interrupt) until they answer, and this node
    runs again from its start with the answers so far (`reinloop.approvals`).

    Why here: LangGraph runs an interrupted node again from its start when the run is resumed, and
    validate_args only computes, so running it again is safe; and since every call of the decision is reviewed
    here, no call has run yet. The calls start in the next step, as execute_tool tasks. LangGraph marks only
    the first step of a run that continues a saved thread as resuming (`CONFIG_KEY_RESUMING`, execute_tool's
    crash check), and that step is validate_args again: an approval's resume is never taken for a crash
    resume, while a call that was in flight when its process died after its approval is in the resumed run's
    first step, so a non-idempotent one still fails closed (and no call is asked about twice).
    """
    request = approval_request(check, thought_of(state.get("messages", []), check["call_id"]))
    answer = interrupt(request, response_schema=answer_schema(ctx.registry[check["name"]]))
    if answer.action == "approve":
        return {**check, "review": "approved"}
    if answer.action == "reject":
        reason = truncate(answer.reason or NO_REASON, ctx.settings.observation_max_chars)
        error = REJECTED_TEMPLATE.format(name=check["name"], reason=reason)
        return {**check, "error_kind": "rejected", "error": error, "attempts": 0, "review": "rejected"}
    # An edit: its arguments passed the tool's schema when the answer was read.
    args, signature = answer.args or {}, _signature(check["name"], answer.canonical)
    return {**check, "args": args, "signature": signature, "review": "edited"}


def _check_call(call: dict[str, Any], key: str, ctx: AgentContext, blocked: dict[str, str]) -> CallCheck:
    name, args, call_id = call["name"], call.get("args") or {}, call["id"]
    if call_id in blocked:  # a middleware hook answered it (`reinloop.middleware`)
        return _check(call_id, name, args, _signature(name, args), key, "blocked", blocked[call_id])
    entry = ctx.registry.get(name)
    if entry is None:
        error = _unknown_tool(name, ctx.registry.names)
        return _check(call_id, name, args, _signature(name, args), key, "unknown_tool", error)
    problems, canonical = entry.validate(args)
    if problems:
        error = INVALID_ARGS_TEMPLATE.format(name=name, problems="; ".join(problems), signature=entry.signature)
        return _check(call_id, name, args, _signature(name, args), key, "invalid_args", error)
    check = _check(call_id, name, args, _signature(name, canonical), key, None, None)
    # In-place retries are for retryable tools; the guards may cut them (the run's budget, a failing tool).
    check["attempts"] = ctx.settings.tool_attempts if entry.retryable else 1
    check["cacheable"] = entry.cacheable
    return check


def _unknown_tool(name: str, names: Sequence[str]) -> str:
    # One tool whose name holds the unknown one or is held in it ("timer_tool", "calc"), else the closest.
    match = [tool for tool in names if tool in name or name in tool]
    if len(match) != 1:
        match = difflib.get_close_matches(name, names, n=1, cutoff=CLOSE_NAME_CUTOFF)
    if match and name:
        return CLOSE_TOOL_TEMPLATE.format(name=name, match=match[0])
    return UNKNOWN_TOOL_TEMPLATE.format(name=name, available=", ".join(names))


def _check(
    call_id: str, name: str, args: Any, signature: str, key: str, error_kind: ErrorKind | None, error: str | None
) -> CallCheck:
    return CallCheck(
        call_id=call_id,
        name=name,
        args=args,
        signature=signature,
        key=key,
        attempts=0,
        error_kind=error_kind,
        error=error,
    )


def _signature(name: str, args: Any) -> str:
    return name + json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)
