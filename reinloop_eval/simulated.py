"""A simulated model that solves an evaluation task by its reference plan, with seeded faults: how it decides
at each decision, each mistake as it makes it, and its summarizer twin.

The rest of the simulation has modules of its own: the fault model, its rates and its draws (`faults`, where
`FAULT_MODEL` documents it), what a run measures (`meters`), the tool faults injected around the tools
(`tool_faults`), and how the model reads its prompt and writes its replies (`conversation`). Their names are
imported from here as before."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, InvalidToolCall
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import PrivateAttr

from reinloop.config import ProtocolName
from reinloop.memory.tokens import TokenCounter
from reinloop.protocols import WrittenProtocol, get_protocol
from reinloop.protocols.interface import new_call_id
from reinloop.testing import bind_as_provider
from reinloop_eval.conversation import Action as Action
from reinloop_eval.conversation import _again, _call, _last_call, _was_read, _with_ids, feedback, names_the_mistake
from reinloop_eval.conversation import _observed as _observed
from reinloop_eval.conversation import _progress as _progress
from reinloop_eval.conversation import read_back as read_back
from reinloop_eval.conversation import written as written
from reinloop_eval.faults import EXTRA_FAULT_RATE as EXTRA_FAULT_RATE
from reinloop_eval.faults import EXTRA_FAULTS as EXTRA_FAULTS
from reinloop_eval.faults import FAULT_MODEL, TOOL_TIMEOUT_S, FaultProfile, runaway_draw
from reinloop_eval.faults import DecisionDraws as DecisionDraws
from reinloop_eval.faults import ExtraDraws as ExtraDraws
from reinloop_eval.faults import decision_draws as decision_draws
from reinloop_eval.faults import extra_draws as extra_draws
from reinloop_eval.meters import Meter, SimulatedClock, reply_tokens
from reinloop_eval.meters import ToolStats as ToolStats
from reinloop_eval.meters import message_tokens as message_tokens
from reinloop_eval.tasks import TRANSLATIONS, EvalTask, Step
from reinloop_eval.tool_faults import _tool_fault as _tool_fault
from reinloop_eval.tool_faults import faulty_tools

__all__ = [
    "FAULT_MODEL",
    "TOOL_TIMEOUT_S",
    "FaultProfile",
    "Meter",
    "SimulatedClock",
    "SimulatedModel",
    "faulty_tools",
    "summarizer_of",
]

# A premature answer: given before the plan is done, so it cannot hold the task's value.
PREMATURE_ANSWER = "I think the answer is 7."
WRONG_ANSWER = "I am not sure; the answer may be 42."
# How a near-repeat loop changes a call each time: the argument, and what is added to it once more each time.
NEAR_REPEAT_TWEAKS = {"calculator": ("expression", " + 0"), "web_search": ("query", " again")}

# What a runaway model searches for: topics of the bundled corpus, so that every search finds something.
RUNAWAY_TOPICS = (
    "speed of light", "Mount Everest", "Eiffel Tower", "Moon distance", "Python release", "nautical mile",
    "water boiling", "LangGraph",
)  # fmt: skip

_TRANSLATOR = "professional translator"
_SUMMARY = "Summary: the agent worked through its plan step by step."


class SimulatedModel(BaseChatModel):
    """Follows `task.plan`: the next step is the first one without a successful observation."""

    task: Any
    profile: Any
    seed: int = 0
    # Which calls this instance receives: an agent's decisions, or (a separate instance given to the agent as
    # its summarizer) summary requests. Known by the instance, never by the request's wording, so rewording
    # a summary prompt cannot change the benchmark.
    role: Literal["decide", "summarize"] = "decide"
    # The format it writes its decisions in, and reads its prompt back with: that of the agent's protocol.
    protocol: ProtocolName = "tool_calling"
    # The run's simulated time (a `SimulatedClock`) and its model calls (a `Meter`), shared with its summarizer
    # twin; None: not kept.
    clock: Any = None
    meter: Any = None

    _counter: TokenCounter = PrivateAttr()
    _runaway_drawn: bool = PrivateAttr(default=False)
    _runaway_calls: int | None = PrivateAttr(default=None)  # decisions since it ran away; None: it did not
    _stubborn_call: ToolCall | None = PrivateAttr(default=None)  # the call it keeps repeating
    _malformed: InvalidToolCall | None = PrivateAttr(default=None)  # its last decision, if that was malformed
    # Its last decision, if that was a call written as plain text or an empty reply: failed unless the agent
    # read the call from the text (its next prompt then holds that call).
    _unread: AIMessage | None = PrivateAttr(default=None)
    _unread_call: ToolCall | None = PrivateAttr(default=None)  # the call that reply wrote; None: an empty reply
    _raw: bool = PrivateAttr(default=False)  # the reply is sent as it is, not in the agent's protocol's format
    _wrong: dict[int, dict[str, Any]] = PrivateAttr(default_factory=dict)  # plan steps done with wrong arguments
    _near: tuple[ToolCall, int] | None = PrivateAttr(default=None)  # a near-repeat loop: the call, repeats so far
    decisions: int = 0
    prompt_tokens: int = 0  # what its decisions were sent: the messages and the tools' schemas bound beside them
    tool_schema_tokens: int = 0  # the tool schemas' part of prompt_tokens

    def model_post_init(self, context: Any) -> None:
        self._counter = TokenCounter()

    @property
    def _llm_type(self) -> str:
        return "reinloop-simulated"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[Any, AIMessage]:
        # It writes its calls from the task's plan, not from the schemas; they are bound as a provider's model
        # binds them, so that each call is sent them and counts their tokens as a provider bills them.
        return bind_as_provider(self, tools, tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.clock is not None:
            self.clock.advance(self.profile.latency_s)
        first = messages[0].text.lower() if messages else ""
        if self.role == "summarize":
            reply = AIMessage(_SUMMARY)
        elif _TRANSLATOR in first:
            key = (messages[-1].text.strip().lower(), first.split("into ")[1].split(".")[0].strip().title())
            reply = AIMessage(TRANSLATIONS.get(key, messages[-1].text))
        else:
            self.decisions += 1
            schemas = self._counter.tools(kwargs.get("tools") or ())
            self.tool_schema_tokens += schemas
            self.prompt_tokens += message_tokens(self._counter, messages) + schemas
            if self.protocol == "tool_calling":
                reply = _with_ids(self._decide(messages), self.seed, self.decisions)
            else:
                writer = get_protocol(self.protocol)
                assert isinstance(writer, WrittenProtocol)  # every protocol but tool_calling writes text
                decided = self._decide(read_back(writer, messages))
                reply = decided if self._raw else written(writer, decided)
        if self.meter is not None:
            schemas = self._counter.tools(kwargs.get("tools") or ())
            self.meter.calls += 1
            self.meter.tool_schema_tokens += schemas
            self.meter.prompt_tokens += message_tokens(self._counter, messages) + schemas
            self.meter.completion_tokens += reply_tokens(self._counter, reply)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    # the decision -------------------------------------------------------------------------------------

    def _decide(self, messages: list[BaseMessage]) -> AIMessage:
        task: EvalTask = self.task
        draws = decision_draws(self.seed, self.decisions)
        extra = extra_draws(self.seed, self.decisions)
        progress = _progress(task, messages, self._wrong)
        done = progress >= len(task.plan)
        previous = _last_call(messages)
        failed, succeeded = _observed(messages, previous)
        if self._malformed is not None:  # its last reply was unreadable: that failed, kept or dropped
            failed, succeeded = self._malformed, None
        unread, self._unread, self._raw = self._unread, None, False
        if unread is not None and not _was_read(self._unread_call, previous):
            if draws.correct >= self.profile.correct_rate:  # does not learn: the same unreadable reply again
                return self._unread_reply(unread, self._unread_call)
            failed = succeeded = None  # corrected: it goes on from where it was
        step = None if done else task.plan[progress]
        fix_rate = self._fix_rate(failed, step, messages)
        reply = self._react(progress, done, previous, failed, succeeded, draws, extra, fix_rate)
        bad = reply.invalid_tool_calls
        self._malformed = bad[0] if bad and not reply.tool_calls else None
        return reply

    def _unread_reply(self, reply: AIMessage, call: ToolCall | None) -> AIMessage:
        """`reply` (a call written as plain text, `call`, or an empty reply, None) as the model's decision: sent
        as it is."""
        self._unread, self._unread_call, self._raw = reply, call, True
        return reply

    def _fix_rate(self, failed: Action | None, step: Step | None, messages: list[BaseMessage]) -> float:
        """The chance it fixes its failed action `failed`: `correct_rate`, times `unnamed_fix_factor` if the
        feedback could have named the mistake and did not (the recovery model, `FAULT_MODEL`)."""
        profile: FaultProfile = self.profile
        if failed is None or names_the_mistake(failed, step, feedback(messages)) is not False:
            return float(profile.correct_rate)
        return float(profile.correct_rate * profile.unnamed_fix_factor)

    def _react(
        self,
        progress: int,
        done: bool,
        previous: Action | None,
        failed: Action | None,
        succeeded: ToolCall | None,
        draws: DecisionDraws,
        extra: ExtraDraws,
        fix_rate: float,
    ) -> AIMessage:
        task: EvalTask = self.task
        override = self._runaway(done) or self._stubborn(succeeded, draws.stubborn) or self._near_repeat(extra.end)
        if override is not None:
            return override
        if failed is not None and draws.correct >= fix_rate:
            return _again(failed)  # does not learn: repeats the failed action
        faults = ["malformed", "bad_args", "unknown_tool", "repeat"] if not done else ["no_stop", "wrong_answer"]
        if previous is None and "repeat" in faults:
            faults.remove("repeat")
        fault = faults[int(draws.which * len(faults))] if draws.fault < self.profile.fault_rate else None
        if fault is None and (other := self._extra_fault(extra.which, done, succeeded)) is not None:
            return self._other(other, task, progress, succeeded, extra.detail)
        if done:
            return _finish(task, fault, wrong=bool(self._wrong))
        return self._step(task.plan[progress], fault, previous, draws.detail)

    def _extra_fault(self, draw: float, done: bool, succeeded: ToolCall | None) -> str | None:
        """The fault with its own rate that `draw` picks, if it applies at this decision."""
        bound, fault = 0.0, None
        profile: FaultProfile = self.profile
        for name, rate in profile.extra_rates():
            bound += rate
            if draw < bound:
                fault = name
                break
        if fault is None:
            return None
        if done and fault != "empty":
            return None  # the others are mistakes on the way to the answer
        if fault == "near_repeat" and (succeeded is None or succeeded["name"] not in NEAR_REPEAT_TWEAKS):
            return None
        return fault

    def _other(self, fault: str, task: EvalTask, progress: int, succeeded: ToolCall | None, detail: float) -> AIMessage:
        """The reply of a fault with its own rate."""
        if fault == "empty":
            return self._unread_reply(AIMessage(""), None)
        if fault == "premature":
            return AIMessage(PREMATURE_ANSWER)
        if fault == "near_repeat":
            assert succeeded is not None
            self._near = (succeeded, 0)
            return self._near_repeat(1.0) or _call(succeeded["name"], succeeded["args"])
        step = task.plan[progress]
        if fault == "wrong_args":
            args = _wrong_args(step.args, detail)
            self._wrong[progress] = args
            return _call(step.tool, args)
        # text_call: the call written as text, as a model whose tool-call template failed writes it
        if self.protocol == "tool_calling":
            text = json.dumps({"name": step.tool, "arguments": step.args}, ensure_ascii=False)
        else:
            text = f"I will use {step.tool} with {json.dumps(step.args, ensure_ascii=False)}."
        return self._unread_reply(AIMessage(text), _call(step.tool, step.args).tool_calls[0])

    def _near_repeat(self, draw: float) -> AIMessage | None:
        """The next call of a near-repeat loop (the same tool, its argument changed once more each time), left
        with probability correct_rate at each decision after the first."""
        if self._near is None:
            return None
        call, repeats = self._near
        if repeats and draw < self.profile.correct_rate:
            self._near = None
            return None
        self._near = (call, repeats + 1)
        key, suffix = NEAR_REPEAT_TWEAKS[call["name"]]
        return _call(call["name"], {**call["args"], key: f"{call['args'][key]}{suffix * (repeats + 1)}"})

    def _runaway(self, done: bool) -> AIMessage | None:
        """The next runaway call, if the model has run away (drawn once, when the answer is first known)."""
        if done and not self._runaway_drawn:
            self._runaway_drawn = True
            if runaway_draw(self.seed) < self.profile.runaway_rate:
                self._runaway_calls = 0
        bound = self.profile.runaway_rounds
        if self._runaway_calls is None or (bound is not None and self._runaway_calls >= bound):
            return None
        self._runaway_calls += 1
        width: int = self.profile.runaway_width
        first = (self._runaway_calls - 1) * width + 1
        calls = [_runaway_call(number) for number in range(first, first + width)]
        return AIMessage("", tool_calls=[call for reply in calls for call in reply.tool_calls])

    def _stubborn(self, succeeded: ToolCall | None, draw: float) -> AIMessage | None:
        """The repeated call of a stubborn loop: started after a success, left with probability correct_rate."""
        if self._stubborn_call is not None:
            if draw < self.profile.correct_rate:
                self._stubborn_call = None
                return None
        elif succeeded is not None and draw < self.profile.stubborn_rate:
            self._stubborn_call = succeeded
        if self._stubborn_call is None:
            return None
        return _call(self._stubborn_call["name"], self._stubborn_call["args"])

    def _step(self, step: Step, fault: str | None, previous: Action | None, detail: float = 0.0) -> AIMessage:
        """The plan's next step, or the mistake `fault` in its place."""
        if fault == "malformed":
            bad = {
                "type": "invalid_tool_call",
                "id": new_call_id(),
                "name": step.tool,
                "args": '{"' + str(step.args)[:20],
                "error": None,
            }
            return AIMessage("", invalid_tool_calls=[bad])
        if fault == "bad_args" and step.args:  # a call without arguments has none to get wrong
            args = dict(step.args)
            key = next(iter(args))
            if detail < 0.5:
                args.pop(key)  # missing
            else:
                args[key] = [args[key]] if not isinstance(args[key], list) else {"x": 1}  # mistyped
            return _call(step.tool, args)
        if fault == "unknown_tool":
            return _call(step.tool + "_tool", step.args)
        if fault == "repeat" and previous is not None:
            return _again(previous)
        return _call(step.tool, step.args)


def _finish(task: EvalTask, fault: str | None, *, wrong: bool = False) -> AIMessage:
    """The reply once the plan is done: the answer, or the mistake `fault` in its place; `wrong`: a step was
    done with wrong arguments, so the answer it reaches is wrong too."""
    if fault == "no_stop":
        step = task.plan[-1]
        return _call(step.tool, step.args)
    if fault == "wrong_answer" or wrong:
        return AIMessage(WRONG_ANSWER)
    return AIMessage(task.answer)


def _wrong_args(args: dict[str, Any], detail: float) -> dict[str, Any]:
    """`args` with one value wrong but of the right type: a digit of a string changed, a number off by one, or
    a string with a word added; which argument, by `detail`."""
    key = list(args)[int(detail * len(args))]
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return {**args, key: value}  # nothing to change it into that is still valid: the same, done wrong
    if not isinstance(value, str):
        return {**args, key: value + 1}
    digit = next((i for i, ch in enumerate(value) if ch.isdigit()), None)
    if digit is None:
        return {**args, key: f"{value} (draft)"}
    changed = str((int(value[digit]) + 1) % 10)
    return {**args, key: value[:digit] + changed + value[digit + 1 :]}


def _runaway_call(number: int) -> AIMessage:
    if number % 2:
        topic = RUNAWAY_TOPICS[number // 2 % len(RUNAWAY_TOPICS)]
        return _call("web_search", {"query": f"{topic} {number}", "max_results": 3})
    return _call("calculator", {"expression": f"{number} * ({number} + 1)"})


def summarizer_of(model: BaseChatModel) -> BaseChatModel:
    """The summary model to give an agent whose model is `model`: a simulated model's summarizer twin (no
    draws from its seeded generator, no decisions counted), or a real model itself."""
    if isinstance(model, SimulatedModel) and model.role == "decide":
        return SimulatedModel(
            task=model.task,
            profile=model.profile,
            seed=model.seed,
            role="summarize",
            clock=model.clock,
            meter=model.meter,
        )
    return model
