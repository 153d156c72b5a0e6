"""A simulated model that solves an evaluation task by its reference plan, with seeded faults, and the
tool faults injected around it. The fault model is documented in `FAULT_MODEL`."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, InvalidToolCall, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import PrivateAttr

from reinloop.config import ProtocolName
from reinloop.eval.tasks import TRANSLATIONS, EvalTask, Step
from reinloop.memory.tokens import TOKENS_PER_REPLY, TokenCounter
from reinloop.protocols import OBSERVATION_LABEL, DecisionProtocol, WrittenProtocol, get_protocol, new_call_id
from reinloop.testing import bind_as_provider
from reinloop.tools.clock import TimerTool
from reinloop.tools.registry import POLICY_KEY, ToolRegistry

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

FAULT_MODEL = """\
Model faults: at each decision, with probability `fault_rate`, the model makes one mistake, drawn uniformly
from those that apply: malformed tool-call JSON; missing or mistyped arguments; an unknown tool name;
repeating its previous call; when the answer is known, not stopping (calling a tool again); a wrong final
answer. Recovery: the model reacts to the outcome of its own last action, whatever the agent appends after it
(a note as a human, system, AI or tool message changes nothing) and whether the agent kept or dropped that
action: a call whose observation failed (an error or an empty result), or a malformed reply (which fails
whatever answers it, and also when the agent drops it and asks again). After a failure it corrects itself
with probability `correct_rate`, else it repeats the failed action (the same call, or the same malformed
one). Tool faults: each tool call, with probability `tool_fault_rate`, raises an exception, does its
work and then hangs for `slow_s` simulated seconds (four times the tool timeout reinloop and the presets have
in the evaluation), or returns an empty result (one of the three, uniformly). Time is simulated, so that no
figure depends on the machine's load: a model's latency, a timer's wait and a slow call's hang advance the
run's clock without sleeping; an agent with no tool timeout (or a longer one) waits the hang out and gets
the result, one whose timeout is shorter than the hang gets a timeout, since such a call hangs until the run
ends (its timeout, a real one, is then the only real wait, and no load makes a hang that never ends finish
within it, nor makes a normal call, milliseconds long, outlast it).

Draws are shared by the agents: each decision draws from a generator seeded by (seed, task, decision index),
each tool call from one seeded by (seed, task, tool-call index), with a fixed number of draws each, so every
agent meets the same faults at the same decision (and the same tool faults at the same tool call), and a run
is the same every time for a given seed.

Two more faults, off by default, use draws of their own (the runaway one per run, the stubborn loop one per
decision), so that with both off every run is the same as without them. Runaway (`runaway_rate`,
AutoGPT-style): at the first decision at which the answer is known, with probability `runaway_rate` the
model does not answer; from then on every decision is a new tool call, whatever it was sent: the n-th (n =
1, 2, ...) is `web_search` for one of eight topics of the search corpus followed by n when n is odd,
`calculator` with "n * (n + 1)" when n is even: valid, read-only calls, never the same twice, that succeed
unless a tool fault hits them. It keeps going for `runaway_rounds` calls and then answers, or, by default,
until the agent stops it. Stubborn loop (`stubborn_rate`): at a decision that follows a successful tool
observation, with probability `stubborn_rate` the model calls the same tool with the same arguments again
instead of moving on (or answering); at each later decision it stops repeating with probability
`correct_rate`, else repeats the call again, whatever the agent answered (the tool's result, an earlier
result, a refusal). A model that has run away repeats nothing.

Five more faults have a rate each (`wrong_args_rate`, `near_repeat_rate`, `premature_rate`,
`text_call_rate`, `empty_rate`; 0 in `FaultProfile`, 0.02 each per decision in `reinloop eval` unless told
otherwise) and draws of their own: at a decision with no other fault, one draw picks at most one of them, each
by its rate. Wrong arguments: the plan's next call with one value changed (a digit, a number off by one, a
word added): valid, so it runs; the model takes it as the step done and its final answer is wrong (only the
task's check catches it). Near-repeat loop: after a successful `calculator` or `web_search` call, the same tool
with its argument changed once more each time (" + 0", " again"), valid and never identical, left with
probability `correct_rate` at each later decision. Premature answer: an answer before the plan is done, which
cannot hold the task's value. A call written as plain text: the plan's next call as the reply's text, a JSON
object `{"name": ..., "arguments": ...}` for native tool calls (what an open model writes when its server's
tool-call template fails), "I will use <tool> with <arguments>." in a text protocol. An empty reply. The last
two are unreadable replies: unless the agent read the call from the text (its next prompt shows that call),
the reply failed, and the model repeats it or corrects itself by `correct_rate`, as after a malformed call.

The model writes in the agent's protocol (`protocol`): native tool calls, or the text of the json, react or
call_tool protocol, the same decisions and the same faults in each; a malformed call is the call with the same
unterminated arguments in that format. It reads its prompt back through the protocol, each `Observation:`
turn as the result of the decision before it, so what it sees does not depend on the format either."""

# The faults with draws of their own, one rate each (`FaultProfile`), and the rate `reinloop eval` gives each
# unless told otherwise (FaultProfile's own default is 0: off).
EXTRA_FAULTS = ("wrong_args", "near_repeat", "premature", "text_call", "empty")
EXTRA_FAULT_RATE = 0.02
# A premature answer: given before the plan is done, so it cannot hold the task's value.
PREMATURE_ANSWER = "I think the answer is 7."
WRONG_ANSWER = "I am not sure; the answer may be 42."
# How a near-repeat loop changes a call each time: the argument, and what is added to it once more each time.
NEAR_REPEAT_TWEAKS = {"calculator": ("expression", " + 0"), "web_search": ("query", " again")}

# What the model did at a decision that called a tool: a call, or a malformed (invalid) one.
Action = ToolCall | InvalidToolCall

# What a runaway model searches for: topics of the bundled corpus, so that every search finds something.
RUNAWAY_TOPICS = (
    "speed of light", "Mount Everest", "Eiffel Tower", "Moon distance", "Python release", "nautical mile",
    "water boiling", "LangGraph",
)  # fmt: skip

_TRANSLATOR = "professional translator"
_SUMMARY = "Summary: the agent worked through its plan step by step."


# The tool timeout of reinloop and the presets in the evaluation (real seconds): a normal call takes
# milliseconds, and a slow call longer than it hangs until the run ends, so no load crosses this margin.
TOOL_TIMEOUT_S = 0.5
# The longest a hung call blocks its thread if its run never releases it (a safety net: runs release it).
HANG_LIMIT_S = 600.0


class Meter:
    """Every model call of a run, whatever made it (a decision, a summary, the translate tool), and its
    tokens: what it was sent (the messages, malformed calls' arguments included, and the tool schemas bound
    beside them) and what it wrote (the reply's text, calls and malformed calls)."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.tool_schema_tokens = 0  # the tool schemas' part of prompt_tokens


def message_tokens(counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    """`counter`'s count of `messages`, with the malformed calls' names and arguments, which a provider bills
    but `TokenCounter` leaves out (reinloop never sends one)."""
    invalid = sum(
        counter.text(call["name"] or "") + counter.text(call["args"] or "")
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.invalid_tool_calls
    )
    return counter.messages(messages) + invalid


class SimulatedClock:
    """A run's simulated time: what the model's latency, the timer's waits and slow calls add, in seconds."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.released = threading.Event()  # set when the run ends: the calls that hang return then

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


@dataclass(frozen=True)
class FaultProfile:
    fault_rate: float = 0.2
    correct_rate: float = 0.7
    tool_fault_rate: float = 0.1
    slow_s: float = 4 * TOOL_TIMEOUT_S  # simulated seconds a slow call hangs
    latency_s: float = 0.0  # simulated model latency per call (simulated seconds)
    runaway_rate: float = 0.0  # per run: once the answer is known, the chance it calls tools instead, on and on
    runaway_rounds: int | None = None  # runaway calls before it answers after all; None: it never does
    stubborn_rate: float = 0.0  # per decision after a successful call: the chance it repeats that call
    # The faults below use draws of their own (`extra_draws`), at a decision with no other fault: each is one
    # mistake with its own rate per decision (see FAULT_MODEL).
    wrong_args_rate: float = 0.0  # valid arguments with a wrong value: only the task's check catches it
    near_repeat_rate: float = 0.0  # after a success, the same tool with slightly changed arguments, on and on
    premature_rate: float = 0.0  # an answer before the plan is done (a wrong one)
    text_call_rate: float = 0.0  # the plan's next call written as plain text instead of a tool call
    empty_rate: float = 0.0  # an empty reply

    def extra_rates(self) -> tuple[tuple[str, float], ...]:
        """The rates of the faults with draws of their own, in the order `extra_draws` tries them."""
        return tuple((fault, getattr(self, f"{fault}_rate")) for fault in EXTRA_FAULTS)


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
    _runaway_calls: int | None = PrivateAttr(default=None)  # calls made since it ran away; None: it did not
    _stubborn_call: ToolCall | None = PrivateAttr(default=None)  # the call it keeps repeating
    _malformed: InvalidToolCall | None = PrivateAttr(default=None)  # its last decision, if that was malformed
    # Its last decision, if that was a call written as plain text or an empty reply: failed unless the agent
    # read the call from the text (its next prompt then holds that call).
    _unread: AIMessage | None = PrivateAttr(default=None)
    _unread_call: ToolCall | None = PrivateAttr(default=None)  # the call a plain-text call wrote
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
            self.meter.completion_tokens += message_tokens(self._counter, [reply]) - TOKENS_PER_REPLY
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
                return self._unread_reply(unread)
            failed = succeeded = None  # corrected: it goes on from where it was
        reply = self._react(progress, done, previous, failed, succeeded, draws, extra)
        bad = reply.invalid_tool_calls
        self._malformed = bad[0] if bad and not reply.tool_calls else None
        return reply

    def _unread_reply(self, reply: AIMessage) -> AIMessage:
        """`reply` (a call written as plain text, or an empty reply) as the model's decision: sent as it is."""
        self._unread, self._raw = reply, True
        return reply

    def _react(
        self,
        progress: int,
        done: bool,
        previous: Action | None,
        failed: Action | None,
        succeeded: ToolCall | None,
        draws: DecisionDraws,
        extra: ExtraDraws,
    ) -> AIMessage:
        task: EvalTask = self.task
        override = self._runaway(done) or self._stubborn(succeeded, draws.stubborn) or self._near_repeat(extra.end)
        if override is not None:
            return override
        if failed is not None and draws.correct >= self.profile.correct_rate:
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
            return self._unread_reply(AIMessage(""))
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
        self._unread_call = _call(step.tool, step.args).tool_calls[0]
        if self.protocol == "tool_calling":
            text = json.dumps({"name": step.tool, "arguments": step.args}, ensure_ascii=False)
        else:
            text = f"I will use {step.tool} with {json.dumps(step.args, ensure_ascii=False)}."
        return self._unread_reply(AIMessage(text))

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
            if random.Random(f"{self.seed}/runaway").random() < self.profile.runaway_rate:
                self._runaway_calls = 0
        bound = self.profile.runaway_rounds
        if self._runaway_calls is None or (bound is not None and self._runaway_calls >= bound):
            return None
        self._runaway_calls += 1
        return _runaway_call(self._runaway_calls)

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
        if fault == "bad_args":
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


class DecisionDraws(NamedTuple):
    """The draws of one decision, all made whether used or not, so that the n-th decision of every agent on a
    (seed, task) meets the same faults."""

    correct: float  # below correct_rate: it corrects itself after a failure
    fault: float  # below fault_rate: it makes a mistake
    which: float  # which of the mistakes that apply
    detail: float  # a bad argument: missing (below 0.5) or mistyped
    stubborn: float  # a stubborn loop: starts below stubborn_rate, ends below correct_rate


class ExtraDraws(NamedTuple):
    """The draws of one decision for the faults with their own rates, from a generator of their own, so that
    with those rates at 0 every run is the same as without them."""

    which: float  # which of them, if any: each takes its rate's share of [0, 1)
    end: float  # a near-repeat loop ends below correct_rate
    detail: float  # a wrong argument: which value it gets


def extra_draws(seed: int, index: int) -> ExtraDraws:
    """The extra draws of decision `index` (1, 2, ...) of a run seeded `seed`: the same for every agent."""
    rng = random.Random(f"{seed}/extra/{index}")
    return ExtraDraws(*(rng.random() for _ in ExtraDraws._fields))


def decision_draws(seed: int, index: int) -> DecisionDraws:
    """The draws of decision `index` (1, 2, ...) of a run seeded `seed`: the same for every agent."""
    rng = random.Random(f"{seed}/decision/{index}")
    return DecisionDraws(*(rng.random() for _ in DecisionDraws._fields))


def tool_draws(seed: int, index: int) -> tuple[float, float]:
    """The draws of tool call `index` (0, 1, ...) of a run seeded `seed`: whether it fails, and how."""
    rng = random.Random(f"{seed}/tool/{index}")
    return rng.random(), rng.random()


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


def _was_read(call: ToolCall | None, previous: Action | None) -> bool:
    """Whether the agent read the plain-text call `call`: the last call its prompt shows is that call."""
    if call is None or previous is None or _malformed(previous):
        return False
    return previous["name"] == call["name"] and previous["args"] == call["args"]


def _runaway_call(number: int) -> AIMessage:
    if number % 2:
        topic = RUNAWAY_TOPICS[number // 2 % len(RUNAWAY_TOPICS)]
        return _call("web_search", {"query": f"{topic} {number}", "max_results": 3})
    return _call("calculator", {"expression": f"{number} * ({number} + 1)"})


def read_back(protocol: DecisionProtocol, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """A prompt rendered by a text-writing `protocol`, in the normal form: each decision as the protocol reads
    it, each `Observation:` turn as a `ToolMessage` answering the next unanswered call before it."""
    registry = ToolRegistry()  # names are kept as written; the arguments are JSON, so no schema is needed
    normal: list[BaseMessage] = []
    waiting: list[str] = []  # ids of the calls of the last decision still without a result
    for message in messages:
        if isinstance(message, AIMessage):
            _, stored = protocol.parse(message, registry)
            normal.append(stored or AIMessage(message.text))
            waiting = [call["id"] or "" for call in stored.tool_calls] if stored else []
        elif isinstance(message, HumanMessage) and message.text.startswith(OBSERVATION_LABEL) and waiting:
            normal.append(ToolMessage(message.text.removeprefix(OBSERVATION_LABEL), tool_call_id=waiting.pop(0)))
        else:
            normal.append(message)
    return normal


def written(protocol: WrittenProtocol, reply: AIMessage) -> AIMessage:
    """`reply` (native tool calls, a malformed call or an answer) as a model using a text-writing `protocol`
    writes it: a malformed call is the call in that format with the same unterminated arguments."""
    if reply.invalid_tool_calls:
        bad = reply.invalid_tool_calls[0]
        template = protocol.format_decision("", [{"name": bad["name"] or "", "args": {}}])
        cut = template.rindex("{}")  # where the (empty) arguments go
        return AIMessage(template[:cut] + (bad["args"] or ""))
    if not reply.tool_calls:
        return AIMessage(protocol.format_answer(reply.text))
    return AIMessage(protocol.format_decision(reply.text, reply.tool_calls))


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


def _with_ids(reply: AIMessage, seed: int, index: int) -> AIMessage:
    """`reply` with call ids drawn from (seed, decision index), in `new_call_id`'s form: an agent may write an
    id into what it sends next (create_agent's note on a malformed call does), so a random id would make the
    tokens of a rerun differ."""
    rng = random.Random(f"{seed}/ids/{index}")

    def fresh() -> str:
        return f"call_{rng.getrandbits(96):024x}"

    calls = [{**call, "id": fresh()} for call in reply.tool_calls]
    invalid = [{**call, "id": fresh()} for call in reply.invalid_tool_calls]
    return reply.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": dict(args), "id": new_call_id(), "type": "tool_call"}])


def _failed(message: ToolMessage) -> bool:
    text = message.text.strip()
    return message.status == "error" or not text or text.startswith("Error") or text in ("[]", "{}", "None")


def _observed(messages: Sequence[BaseMessage], previous: Action | None) -> tuple[Action | None, ToolCall | None]:
    """The outcome of the model's last action `previous` (see `_last_call`), as (action, None) if it failed,
    (None, call) if it succeeded, (None, None) if it is not known (no action yet, or not answered).

    A malformed call failed, whatever answered it. A call's outcome is its observation, the last tool message
    after it. Notes an agent adds (a correction hint, a reflection turn, a refusal), as a human, system or AI
    message without calls, neither hide nor change that outcome: the model reacts the same whatever kind of
    message the agent writes them in.
    """
    if previous is None:
        return None, None
    if _malformed(previous):
        return previous, None
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            return (previous, None) if _failed(message) else (None, previous)  # type: ignore[return-value]
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            return None, None  # its last call was not answered
    return None, None


def _progress(task: EvalTask, messages: Sequence[BaseMessage], wrong: dict[int, dict[str, Any]] | None = None) -> int:
    """Plan steps done: successful observations of the plan's tools, in order; a step done with the wrong
    arguments `wrong` holds for it counts as done (the model does not know)."""
    names = {}
    for message in messages:
        if isinstance(message, AIMessage):
            names.update({call["id"]: call for call in message.tool_calls})
    progress = 0
    for message in messages:
        if progress >= len(task.plan) or not isinstance(message, ToolMessage) or _failed(message):
            continue
        call = names.get(message.tool_call_id)
        step = task.plan[progress]
        if call is not None and call["name"] == step.tool and call["args"] in (step.args, (wrong or {}).get(progress)):
            progress += 1
    return progress


def _last_call(messages: Sequence[BaseMessage]) -> Action | None:
    """The model's last action the messages show: the last call of the last reply that made one, a malformed
    (invalid) call included."""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            return message.tool_calls[-1] if message.tool_calls else message.invalid_tool_calls[-1]
    return None


def _malformed(action: Action) -> bool:
    return action.get("type") == "invalid_tool_call"


def _again(action: Action) -> AIMessage:
    """The same action again: the same call, or the same malformed one."""
    if _malformed(action):
        return AIMessage("", invalid_tool_calls=[{**action, "id": new_call_id()}])
    return _call(action["name"] or "", action["args"])  # type: ignore[arg-type]


class ToolStats:
    """Counts tool executions across the wrapped tools of one run, and those that succeeded."""

    def __init__(self) -> None:
        self.executed = 0
        self.succeeded = 0  # ran to a result: no exception and no injected empty result (slow ones count)

    def wasted(self, plan_steps: int) -> int:
        """Executions that did not serve the task: all of them but the successful ones, counted up to the
        number of steps in the task's reference plan."""
        return self.executed - min(plan_steps, self.succeeded)


def faulty_tools(
    tools: Sequence[BaseTool],
    profile: FaultProfile,
    seed: int,
    stats: ToolStats,
    *,
    handle_errors: bool = False,
    clock: SimulatedClock | None = None,
    timeout_s: float | None = None,
) -> list[BaseTool]:
    """The tools with seeded faults injected: exceptions (a backend that failed, which another attempt may
    fix), slow calls, empty results.

    A slow call hangs `profile.slow_s` simulated seconds on `clock`: an agent whose tool timeout `timeout_s`
    is shorter finds it hanging until the clock is released (its run ended), any other waits it out at once.
    The timer waits on `clock` too, if one is given. `handle_errors`: the tools handle their own errors, as a
    LangChain tool with `handle_tool_error=True` does: any exception is raised as a `ToolException`, which the
    tool turns into an error observation.
    """
    if clock is not None:  # with no clock (a real model's run) the timer waits in real time
        for tool in tools:
            if isinstance(tool, TimerTool):
                tool.sleep = clock.advance
    clock = clock or SimulatedClock()

    def wrap(tool: BaseTool) -> BaseTool:
        def run(**kwargs: Any) -> Any:
            fault = _tool_fault(profile, seed, stats.executed)  # the n-th call of the run, whichever agent made it
            stats.executed += 1
            if fault == "exception":
                raise ConnectionError(f"{tool.name} failed: simulated internal error")
            if fault == "empty":
                return ""
            result = tool.invoke(kwargs)
            stats.succeeded += 1
            if fault == "slow":
                # The work is done before the hang, so what a run did is known when it ends, even when an
                # agent stopped waiting and left the call running.
                _hang(clock, profile.slow_s, timeout_s)
            return result

        # The tool's run policy but its isolation: what reinloop may retry or answer from cache stays as with
        # the tool itself, while the wrapper, whose draws and counts live here, runs in this process.
        policy = {k: v for k, v in ((tool.metadata or {}).get(POLICY_KEY) or {}).items() if k != "isolation"}
        return StructuredTool.from_function(
            func=_handled(run) if handle_errors else run,
            handle_tool_error=handle_errors,
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            metadata={POLICY_KEY: policy},
        )

    return [wrap(tool) for tool in tools]


TOOL_FAULTS = ("exception", "slow", "empty")


def _tool_fault(profile: FaultProfile, seed: int, index: int) -> str | None:
    hit, which = tool_draws(seed, index)
    return TOOL_FAULTS[int(which * len(TOOL_FAULTS))] if hit < profile.tool_fault_rate else None


def _hang(clock: SimulatedClock, hang_s: float, timeout_s: float | None) -> None:
    """A slow call's hang: waited out in simulated time, or, past the agent's timeout, until the run ends."""
    if timeout_s is not None and hang_s > timeout_s:
        clock.advance(timeout_s)  # the agent gives up at its timeout
        clock.released.wait(HANG_LIMIT_S)
    else:
        clock.advance(hang_s)


def _handled(run: Callable[..., Any]) -> Callable[..., Any]:
    """`run`, its exceptions raised as a `ToolException` (what a tool with handle_tool_error=True reports)."""

    def handled(**kwargs: Any) -> Any:
        try:
            return run(**kwargs)
        except ToolException:
            raise
        except Exception as exc:
            raise ToolException(f"Error: {type(exc).__name__}: {exc}") from exc

    return handled
