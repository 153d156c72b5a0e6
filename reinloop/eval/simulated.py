"""A simulated model that solves an evaluation task by its reference plan, with seeded faults, and the
tool faults injected around it. The fault model is documented in `FAULT_MODEL`."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import PrivateAttr

from reinloop.eval.tasks import TRANSLATIONS, EvalTask
from reinloop.memory.tokens import TokenCounter
from reinloop.protocols import new_call_id

__all__ = ["FAULT_MODEL", "FaultProfile", "SimulatedModel", "faulty_tools", "summarizer_of"]

FAULT_MODEL = """\
Model faults: at each decision, with probability `fault_rate`, the model makes one mistake, drawn uniformly
from those that apply: malformed tool-call JSON; missing or mistyped arguments; an unknown tool name;
repeating its previous call; when the answer is known, not stopping (calling a tool again); a wrong final
answer. After an error observation it corrects itself with probability `correct_rate`, else it repeats the
failed call. Tool faults: each tool call, with probability `tool_fault_rate`, raises an exception, hangs for
`slow_s` seconds (four times reinloop's tool timeout in the evaluation), or returns an empty result (one of
the three, uniformly). Every draw comes from a random generator seeded by (seed, task, agent), so a run is
the same every time for a given seed."""

_TRANSLATOR = "professional translator"
_SUMMARY = "Summary: the agent worked through its plan step by step."


@dataclass(frozen=True)
class FaultProfile:
    fault_rate: float = 0.2
    correct_rate: float = 0.7
    tool_fault_rate: float = 0.1
    slow_s: float = 0.5
    latency_s: float = 0.0  # simulated model latency per call


class SimulatedModel(BaseChatModel):
    """Follows `task.plan`: the next step is the first one without a successful observation."""

    task: Any
    profile: Any
    seed: int = 0
    # Which calls this instance receives: an agent's decisions, or (a separate instance given to the agent as
    # its summarizer) summary requests. Known by the instance, never by the request's wording, so rewording
    # a summary prompt cannot change the benchmark.
    role: Literal["decide", "summarize"] = "decide"

    _rng: random.Random = PrivateAttr()
    _counter: TokenCounter = PrivateAttr()
    decisions: int = 0
    prompt_tokens: int = 0

    def model_post_init(self, context: Any) -> None:
        self._rng = random.Random(self.seed)
        self._counter = TokenCounter()

    @property
    def _llm_type(self) -> str:
        return "reinloop-simulated"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[Any, AIMessage]:
        return self  # it writes its calls from the task's plan, not from tool schemas

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.profile.latency_s:
            time.sleep(self.profile.latency_s)
        first = messages[0].text.lower() if messages else ""
        if self.role == "summarize":
            reply = AIMessage(_SUMMARY)
        elif _TRANSLATOR in first:
            key = (messages[-1].text.strip().lower(), first.split("into ")[1].split(".")[0].strip().title())
            reply = AIMessage(TRANSLATIONS.get(key, messages[-1].text))
        else:
            self.decisions += 1
            self.prompt_tokens += self._counter.messages(messages)
            reply = self._decide(messages)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    # the decision -------------------------------------------------------------------------------------

    def _decide(self, messages: list[BaseMessage]) -> AIMessage:
        task: EvalTask = self.task
        progress = _progress(task, messages)
        previous = _last_call(messages)
        last = messages[-1] if messages else None
        failed_last = isinstance(last, ToolMessage) and _failed(last) and previous is not None
        if failed_last and self._rng.random() >= self.profile.correct_rate:
            return _call(previous["name"], previous["args"])  # does not learn: repeats the failed call
        done = progress >= len(task.plan)
        faults = ["malformed", "bad_args", "unknown_tool", "repeat"] if not done else ["no_stop", "wrong_answer"]
        if previous is None and "repeat" in faults:
            faults.remove("repeat")
        fault = self._rng.choice(faults) if self._rng.random() < self.profile.fault_rate else None
        if done:
            if fault == "no_stop":
                step = task.plan[-1]
                return _call(step.tool, step.args)
            if fault == "wrong_answer":
                return AIMessage("I am not sure; the answer may be 42.")
            return AIMessage(task.answer)
        step = task.plan[progress]
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
            if self._rng.random() < 0.5:
                args.pop(key)  # missing
            else:
                args[key] = [args[key]] if not isinstance(args[key], list) else {"x": 1}  # mistyped
            return _call(step.tool, args)
        if fault == "unknown_tool":
            return _call(step.tool + "_tool", step.args)
        if fault == "repeat" and previous is not None:
            return _call(previous["name"], previous["args"])
        return _call(step.tool, step.args)


def summarizer_of(model: BaseChatModel) -> BaseChatModel:
    """The summary model to give an agent whose model is `model`: a simulated model's summarizer twin (no
    draws from its seeded generator, no decisions counted), or a real model itself."""
    if isinstance(model, SimulatedModel) and model.role == "decide":
        return SimulatedModel(task=model.task, profile=model.profile, seed=model.seed, role="summarize")
    return model


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": dict(args), "id": new_call_id(), "type": "tool_call"}])


def _failed(message: ToolMessage) -> bool:
    text = message.text.strip()
    return message.status == "error" or not text or text.startswith("Error") or text in ("[]", "{}", "None")


def _progress(task: EvalTask, messages: Sequence[BaseMessage]) -> int:
    """Plan steps done: successful observations of the plan's tools, in order."""
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
        if call is not None and call["name"] == step.tool and call["args"] == step.args:
            progress += 1
    return progress


def _last_call(messages: Sequence[BaseMessage]) -> ToolCall | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            return message.tool_calls[-1]
    return None


class ToolStats:
    """Counts tool executions across the wrapped tools of one run."""

    def __init__(self) -> None:
        self.executed = 0


def faulty_tools(tools: Sequence[BaseTool], profile: FaultProfile, seed: int, stats: ToolStats) -> list[BaseTool]:
    """The tools with seeded faults injected: exceptions, slow calls, empty results."""
    rng = random.Random(seed)

    def wrap(tool: BaseTool) -> BaseTool:
        def run(**kwargs: Any) -> Any:
            stats.executed += 1
            if rng.random() < profile.tool_fault_rate:
                fault = rng.choice(["exception", "slow", "empty"])
                if fault == "exception":
                    raise ToolException(f"{tool.name} failed: simulated internal error")
                if fault == "empty":
                    return ""
                time.sleep(profile.slow_s)
            return tool.invoke(kwargs)

        return StructuredTool.from_function(
            func=run, name=tool.name, description=tool.description, args_schema=tool.args_schema
        )

    return [wrap(tool) for tool in tools]
