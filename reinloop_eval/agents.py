"""The agents the evaluation compares, each as a runner of one task: the naive loop, create_agent without and
with LangChain's middleware (with the re-asking middleware, and with recovery of every unreadable reply: the
fair peer), reinloop, reinloop with one of its guards or features taken out (the ablations), and the seed
presets; the budget they are held to, and the protocol and the tool timeout each has in the evaluation."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from langchain.agents.middleware import AgentMiddleware, ModelResponse, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from reinloop.config import AgentConfig, ProtocolName
from reinloop.guards import disable
from reinloop.presets import PRESETS, preset
from reinloop_eval.faults import TOOL_TIMEOUT_S, FaultProfile
from reinloop_eval.simulated import summarizer_of
from reinloop_eval.tasks import EvalTask

__all__ = [
    "ABLATIONS",
    "AGENTS",
    "BUDGET",
    "FAIR_PEER",
    "HARD_STOPS",
    "PEER_AGENTS",
    "PRESET_AGENTS",
    "REASKING",
    "REINLOOP_AGENTS",
    "Outcome",
    "ReaskAfterMalformedReply",
    "RecoverUnreadableReply",
    "Runner",
    "protocol_of",
    "tool_timeout_of",
]

BUDGET = 20  # rounds each agent is meant to take at most (reinloop's max_iterations, the middleware's call limit)
# Times the re-asking middleware asks again after a malformed reply: reinloop's default max_parse_retries.
REASK_RETRIES = AgentConfig().max_parse_retries
HARD_CAP = 60  # rounds before the evaluation stops an agent that does not stop itself, so that it ends
# Finishes of a run stopped by the evaluation's cap rather than by the agent: the naive loop's, and LangGraph's
# recursion limit on create_agent (set at HARD_CAP rounds). Recorded as outcomes, never as crashes.
HARD_STOPS = ("cap", "recursion_limit")

# How ModelCallLimitMiddleware's closing message starts when it ends a run (exit_behavior "end").
CALL_LIMIT_TEXT = "Model call limits exceeded"
REASKING = "create_agent + middleware + re-ask"
# The fair best peer, the bar reinloop is compared with: the re-asking peer that also recovers every unreadable
# reply, as a careful LangChain user would write it (`RecoverUnreadableReply`).
FAIR_PEER = "create_agent + recovery"
PEER_AGENTS = ("naive loop", "create_agent", "create_agent + middleware", REASKING, FAIR_PEER)
# The guards that act during a run, each taken out of reinloop in turn. Not ablated alone: token_budget (the
# evaluation sets no run_token_budget, so it never acts), and max_iterations, step_limit and middleware (the
# budget every agent is held to, and what a run needs to end at all). "all guards" takes out the four and
# token_budget; max_iterations stays at BUDGET, as for full reinloop.
ABLATED_GUARDS = ("dead_loop", "error_streak", "tool_circuit", "max_tool_attempts")
# Each ablation: its AgentConfig settings over reinloop's, and the guards it disables. Argument validation is
# not ablated: it is a node of the loop, not a setting.
ABLATIONS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    **{f"reinloop -{guard}": ({}, (guard,)) for guard in ABLATED_GUARDS},
    "reinloop -all guards": ({}, (*ABLATED_GUARDS, "token_budget")),
    "reinloop -parse retries": ({"max_parse_retries": 0}, ()),
}
REINLOOP_AGENTS = ("reinloop", *ABLATIONS)
AGENTS = PEER_AGENTS + REINLOOP_AGENTS
# The agents whose tools handle their own errors (`handle_tool_error=True`): a tool's exception is an error
# observation, not a crash. The middleware agents' tools raise, so that ToolRetryMiddleware sees the exception
# and retries (after its last retry it answers with an error observation too); the naive loop crashes, as the
# seeds' starting point did.
TOOLS_HANDLE_ERRORS = ("create_agent",)
# The seed articles' loops (`reinloop.presets`), as extra rows: each writes its own protocol's format.
PRESET_AGENTS = tuple(f"preset {name}" for name in PRESETS)


class Outcome(NamedTuple):
    """How a run ended: the final answer (None without one), the finish, and the rounds it took where the
    agent counts them apart from its decisions (reinloop asks again for an unreadable reply within a round,
    as its max_iterations counts); None: each decision was a round."""

    final: str | None
    finish: str
    rounds: int | None = None
    reasks: int = 0  # decisions asked for again within a round (the re-asking middleware's), not rounds


Runner = Callable[[BaseChatModel, Sequence[BaseTool], EvalTask, RunnableConfig], Outcome]


def _naive(model: BaseChatModel, tools: Sequence[BaseTool], task: EvalTask, config: RunnableConfig) -> Outcome:
    """The seeds' starting point: call the model, run what it asks, no validation, no feedback, no breaker."""
    by_name = {tool.name: tool for tool in tools}
    bound = model.bind_tools(tools)  # as any loop must, for the model to know the tools
    messages: list[BaseMessage] = [HumanMessage(task.prompt)]
    for _ in range(HARD_CAP):
        reply = bound.invoke(messages, config)
        messages.append(reply)
        if reply.invalid_tool_calls:
            json.loads(reply.invalid_tool_calls[0]["args"] or "")  # parses the arguments itself: crashes on bad JSON
        if not reply.tool_calls:
            return Outcome(reply.text, "answered")
        for call in reply.tool_calls:
            result = by_name[call["name"]].invoke(call["args"])  # unknown tool or tool error: crash
            messages.append(ToolMessage(str(result), tool_call_id=call["id"], name=call["name"]))
    return Outcome(None, "cap")


def _create_agent(middleware: Callable[[BaseChatModel], list[Any]]) -> Runner:
    def run(model: BaseChatModel, tools: Sequence[BaseTool], task: EvalTask, config: RunnableConfig) -> Outcome:
        from langchain.agents import create_agent
        from langgraph.errors import GraphRecursionError

        stack = middleware(model)
        agent = create_agent(model, list(tools), middleware=stack)
        # A round visits each node once (the model, the tools, each middleware hook): HARD_CAP rounds.
        limit: RunnableConfig = {**config, "recursion_limit": (len(agent.nodes) - 1) * HARD_CAP + 1}
        try:
            result = agent.invoke({"messages": [HumanMessage(task.prompt)]}, limit)
        except GraphRecursionError:
            return Outcome(None, "recursion_limit", reasks=_reasks(stack))
        last = result["messages"][-1]
        reasks = _reasks(stack)
        if isinstance(last, AIMessage) and last.text.startswith(CALL_LIMIT_TEXT):
            return Outcome(None, "call_limit", reasks=reasks)  # the middleware's note that it stopped, not an answer
        if isinstance(last, AIMessage) and not last.tool_calls:
            # a reply with only malformed calls ends create_agent's run: no answer, whatever its text
            finish = "malformed_reply" if last.invalid_tool_calls else "answered"
            return Outcome(None if last.invalid_tool_calls else last.text, finish, reasks=reasks)
        return Outcome(None, "stopped", reasks=reasks)

    return run


def _reasks(stack: Sequence[Any]) -> int:
    """The decisions the re-asking middleware of `stack` asked for again (none without one)."""
    return sum(layer.reasks for layer in stack if isinstance(layer, ReaskAfterMalformedReply))


def _standard_middleware(model: BaseChatModel) -> list[Any]:
    from langchain.agents.middleware import (
        ModelCallLimitMiddleware,
        SummarizationMiddleware,
        ToolCallLimitMiddleware,
        ToolRetryMiddleware,
    )

    return [
        ModelCallLimitMiddleware(run_limit=BUDGET, exit_behavior="end"),
        ToolCallLimitMiddleware(run_limit=2 * BUDGET),
        ToolRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False),
        SummarizationMiddleware(summarizer_of(model), trigger=("tokens", 6_000)),
    ]


def _recovering_middleware(model: BaseChatModel) -> list[Any]:
    """The re-asking stack with `RecoverUnreadableReply` in the re-asking middleware's place (first)."""
    return [RecoverUnreadableReply(), *_standard_middleware(model)]


def _reasking_middleware(model: BaseChatModel) -> list[Any]:
    """The standard middleware, and one that asks the model again after a reply holding only malformed tool
    calls (which would end create_agent's run), as reinloop's parse retry does. It comes first, so that its
    `after_model` runs last: a jump back to the model from an earlier `after_model` would skip the call
    limit's count, and the new step would not be counted."""
    return [ReaskAfterMalformedReply(), *_standard_middleware(model)]


class ReaskAfterMalformedReply(AgentMiddleware):
    """Asks the model again, up to `retries` times, when its reply holds malformed tool calls and no valid one
    (a reply that would end create_agent's run); the replies asked again for never reach the state: the ten
    lines that make create_agent recover as reinloop's parse retry does. With `persist`, a reply still
    malformed after them does not end the run either: it stays, with a note, and the model is called again in
    a new step (counted by the model call limit), as reinloop goes on to its next round."""

    def __init__(self, retries: int = REASK_RETRIES, *, persist: bool = True) -> None:
        super().__init__()
        self.retries = retries
        self.persist = persist
        self.reasks = 0

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        response = handler(request)
        for _ in range(self.retries):
            if not _only_malformed(next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)):
                break
            self.reasks += 1
            response = handler(request)
        return response

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1] if state["messages"] else None
        if not self.persist or not _only_malformed(last):
            return None
        return {"messages": [HumanMessage(MALFORMED_NOTE)], "jump_to": "model"}


# What the persisting re-ask middleware tells the model after a reply still malformed after its retries.
MALFORMED_NOTE = "Your tool call could not be parsed (malformed JSON arguments). Reply again with a valid call."


def _only_malformed(message: BaseMessage | None) -> bool:
    """Whether `message` is a reply holding malformed tool calls and no valid one."""
    return isinstance(message, AIMessage) and bool(message.invalid_tool_calls) and not message.tool_calls


# What the recovering middleware answers an unreadable reply with: what was wrong, and what to send instead.
EMPTY_REPLY_NOTE = "Your reply was empty. Call one of the tools, or give your final answer."
MALFORMED_CALL_NOTE = (
    "Error: not run: the arguments of your call to {name!r} are not a valid JSON object{error}. Call it again "
    "with its arguments as one JSON object."
)


class RecoverUnreadableReply(ReaskAfterMalformedReply):
    """The re-asking middleware recovering every unreadable reply, as a careful LangChain user writes it: a tool
    call written as JSON text (``{"name": ..., "arguments": {...}}``, what an open model writes when its
    server's tool-call template fails) becomes that native call; an empty reply, or one of malformed calls, is
    asked again with a note saying what was wrong. The same budget: `retries` re-asks per model step, then,
    with `persist`, the reply stays with a note and the model is called again in a new step."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        tools = {getattr(tool, "name", None) or tool.get("name") for tool in request.tools}
        response = handler(request)
        for attempt in range(self.retries + 1):
            reply = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
            if reply is None:
                return response
            if (call := _written_call(reply, tools, len(request.messages) + attempt)) is not None:
                return ModelResponse(result=[call], structured_response=response.structured_response)
            notes = _what_was_wrong(reply)
            if not notes or attempt == self.retries:
                return response
            self.reasks += 1
            response = handler(request.override(messages=[*request.messages, *notes]))
        return response

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1] if state["messages"] else None
        if self.persist and isinstance(last, AIMessage) and _empty(last):
            return {"messages": [HumanMessage(EMPTY_REPLY_NOTE)], "jump_to": "model"}
        return super().after_model(state, runtime)


def _written_call(reply: AIMessage, tools: set[str | None], index: int) -> AIMessage | None:
    """`reply` as the native call its text writes as JSON (in a code fence or not), if it writes one of `tools`.
    The call's id is drawn from the text and `index`, so that a rerun sends the same tokens."""
    if reply.tool_calls or reply.invalid_tool_calls:
        return None
    text = reply.text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        written = json.loads(text)
    except ValueError:
        return None
    if not isinstance(written, dict) or written.get("name") not in tools:
        return None
    args = written.get("arguments", written.get("parameters", {}))
    if not isinstance(args, dict):
        return None
    digest = hashlib.sha256(f"{index}/{text}".encode()).hexdigest()[:24]
    call = {"name": written["name"], "args": args, "id": f"call_{digest}", "type": "tool_call"}
    return reply.model_copy(update={"content": "", "tool_calls": [call]})


def _what_was_wrong(reply: AIMessage) -> list[BaseMessage]:
    """What to send after the unreadable `reply` to ask again: a note for an empty reply; the reply and an error
    result for each of its malformed calls (a provider wants every call answered); nothing for another reply."""
    if _empty(reply):
        return [HumanMessage(EMPTY_REPLY_NOTE)]
    if not _only_malformed(reply):
        return []
    notes: list[BaseMessage] = [reply]
    for bad in reply.invalid_tool_calls:
        error = f" ({bad['error']})" if bad.get("error") else ""
        text = MALFORMED_CALL_NOTE.format(name=bad.get("name") or "unknown", error=error)
        notes.append(ToolMessage(text, tool_call_id=bad.get("id") or "", status="error"))
    return notes


def _empty(reply: AIMessage) -> bool:
    return not reply.tool_calls and not reply.invalid_tool_calls and not reply.text.strip()


def _reinloop(settings: dict[str, Any], protocol: Any = None, without: Sequence[str] = ()) -> Runner:
    """reinloop with an AgentConfig of `settings` (and a custom protocol object, if given), without the built-in
    guards named in `without`."""

    def run(model: BaseChatModel, tools: Sequence[BaseTool], task: EvalTask, config: RunnableConfig) -> Outcome:
        from reinloop import AgentConfig, build_agent

        agent = build_agent(
            model,
            list(tools),
            config=AgentConfig(**settings),
            summary_model=summarizer_of(model),
            protocol=protocol,
            guards=[disable(name) for name in without],
        )
        result = agent.invoke({"task": task.prompt}, config)
        return Outcome(result["final_answer"], result["finish_reason"], result["iteration"])

    return run


def _runners(profile: FaultProfile, real: Any = None) -> dict[str, Runner]:
    # Slow calls longer than it hang until the run ends, normal ones take milliseconds (see TOOL_TIMEOUT_S). A
    # preset keeps its own limits but gets this timeout too (no seed sets one), so every row meets the same faults.
    timeout = {"tool_timeout_s": TOOL_TIMEOUT_S}
    base: dict[str, Any] = {"max_iterations": BUDGET, **timeout}
    protocol = None
    if real is not None:  # a real model: its protocol and limits, and real tool timeouts
        base, protocol = {"max_iterations": BUDGET, "protocol": real.protocol, **real.config}, real.decision_protocol
    reinloops = {
        agent: _reinloop({**base, **settings}, protocol, without)
        for agent, (settings, without) in {"reinloop": ({}, ()), **ABLATIONS}.items()
    }
    presets = {
        agent: _reinloop({**_preset_of(agent).model_dump(exclude_unset=True), **timeout}) for agent in PRESET_AGENTS
    }
    return {
        "naive loop": _naive,
        "create_agent": _create_agent(lambda model: []),
        "create_agent + middleware": _create_agent(_standard_middleware),
        REASKING: _create_agent(_reasking_middleware),
        FAIR_PEER: _create_agent(_recovering_middleware),
        **reinloops,
        **presets,
    }


@functools.cache  # read for every run of a preset row: its runner and its model's protocol
def _preset_of(agent: str) -> AgentConfig:
    return preset(agent.removeprefix("preset "))


def tool_timeout_of(agent: str) -> float | None:
    """The tool timeout `agent` has in the evaluation: reinloop's (its ablations') and the presets', None for the
    others."""
    return TOOL_TIMEOUT_S if agent in REINLOOP_AGENTS or agent in PRESET_AGENTS else None


def protocol_of(agent: str) -> ProtocolName:
    """The protocol the simulated model writes for `agent`: a preset's own, native tool calls for the others."""
    return _preset_of(agent).protocol if agent in PRESET_AGENTS else "tool_calling"
