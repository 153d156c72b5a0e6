"""BFCL's tasks through the evaluation's agents, each turn a run of the agent on the same model, and each run
scored by BFCL's checkers on the calls it executed.

The model is the replaying one (the evaluation's simulated model following the ground truth as its plan, with
its seeded faults: `replay_faults`) or a real one (a `reinloop.models.ChosenModel`: the embedded model, any
OpenAI-compatible endpoint). A multi-turn entry's turns run one after the other in the same BFCL environments;
the prompt of a later turn recaps the earlier ones (their requests, the calls run with their results, the
answers), the same text for every agent, since each of the evaluation's agents runs from one prompt, where
BFCL's own inference sends the whole message history."""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool

from reinloop.text import truncate
from reinloop_eval.agents import (
    FAIR_PEER,
    REASKING,
    REINLOOP_AGENTS,
    TOOLS_HANDLE_ERRORS,
    Outcome,
    _runners,
    protocol_of,
    tool_timeout_of,
)
from reinloop_eval.bfcl.bridge import Bfcl
from reinloop_eval.bfcl.tasks import BfclTask, Executed, bfcl_tools, call_text
from reinloop_eval.faults import FaultProfile
from reinloop_eval.meters import Meter, SimulatedClock, ToolStats
from reinloop_eval.run import _CallCounter
from reinloop_eval.simulated import SimulatedModel
from reinloop_eval.tasks import EvalTask
from reinloop_eval.tool_faults import faulty_tools

__all__ = ["BFCL_AGENTS", "BfclRecord", "replay_faults", "run_bfcl", "run_task", "turn_prompt"]

# reinloop, the re-asking peer and the fair best peer: the agents BFCL runs by default.
BFCL_AGENTS = ("reinloop", REASKING, FAIR_PEER)
FINAL_ANSWER = "Done."  # the replaying model's answer once a turn's calls are made (BFCL scores only the calls)
RECAP = "Earlier in this conversation:"
RECAP_RESULT_CHARS = 300  # of each earlier call's result in the recap
NO_FAULTS = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0)


def replay_faults(rate: float) -> FaultProfile:
    """The replaying model's faults at `rate`: at each decision, with probability `rate`, one of malformed
    tool-call JSON, a missing or mistyped argument, an unknown tool or its previous call again (after the last
    call: not stopping, or a wrong answer, which BFCL does not score); a call written as text and an empty reply
    at `rate`/4 each; each tool call failing at `rate`/2, with an exception or an empty result (or, the third
    tool fault of the evaluation, a slow call, here with no delay: every agent gets its result)."""
    return FaultProfile(
        fault_rate=rate, text_call_rate=rate / 4, empty_rate=rate / 4, tool_fault_rate=rate / 2, slow_s=0.0
    )


@dataclass
class BfclRecord:
    """One agent on one BFCL task at one seed: BFCL's verdict and what the run spent."""

    agent: str
    category: str
    task: str
    seed: int
    success: bool  # BFCL's checker found the executed calls right (and the agent did not crash)
    error_type: str  # BFCL's error type when not ("crash: <exception>" for a crash), else ""
    decisions: int  # model calls to decide, over all turns (a decision asked for again counts)
    prompt_tokens: int
    completion_tokens: int
    tool_calls: int  # calls executed (recorded: refused, failed-before-running and cached calls are not)
    finishes: list[str]  # how each turn's run ended
    crashed: bool
    wall_s: float
    calls: Any = field(default=None)  # what the checker scored: [{function: args}], or each turn's call text


@dataclass
class _Spent:
    """What a task's runs spent, summed over its turns."""

    meter: Meter = field(default_factory=Meter)
    counter: _CallCounter = field(default_factory=_CallCounter)
    decisions: int = 0
    finishes: list[str] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    crash: str = ""


def run_bfcl(
    tasks: Sequence[BfclTask],
    bfcl: Bfcl,
    *,
    agents: Sequence[str] = BFCL_AGENTS,
    seeds: Sequence[int] = (0,),
    profile: FaultProfile = NO_FAULTS,
    real: Any = None,
    progress: Callable[[BfclRecord], None] | None = None,
) -> list[BfclRecord]:
    """Every agent on every task at every seed; `real`: a `ChosenModel` instead of the replaying model."""
    records = []
    for seed in seeds:
        for task in tasks:
            for agent in agents:
                records.append(run_task(agent, task, seed, bfcl, profile, real))
                if progress is not None:
                    progress(records[-1])
    return records


def run_task(
    agent: str, task: BfclTask, seed: int, bfcl: Bfcl, profile: FaultProfile = NO_FAULTS, real: Any = None
) -> BfclRecord:
    """`agent` on `task`: its turns one after the other, then BFCL's checker on the calls they executed."""
    run = _TaskRun(agent, task, seed, bfcl, profile, real)
    start = time.perf_counter()
    for turn in range(len(task.turns)):
        if not run.turn(turn):
            break
    wall = time.perf_counter() - start
    executed, spent = run.executed, run.spent
    valid, error_type = _verdict(bfcl, task, executed)
    tokens = spent.meter if real is None else spent.counter
    return BfclRecord(
        agent=agent,
        category=task.category,
        task=task.id,
        seed=seed,
        success=valid and not spent.crash,
        error_type=spent.crash or error_type,
        decisions=spent.decisions if real is None else spent.counter.calls,
        prompt_tokens=tokens.prompt_tokens,
        completion_tokens=tokens.completion_tokens,
        tool_calls=sum(len(calls) for calls in executed.turns),
        finishes=spent.finishes,
        crashed=bool(spent.crash),
        wall_s=round(wall, 3),
        calls=executed.multi_turn_calls(len(task.turns)) if task.multi_turn else executed.ast_calls(),
    )


@dataclass
class _TaskRun:
    """An agent's run of a task, turn by turn, in the BFCL environments kept under `live`."""

    agent: str
    task: BfclTask
    seed: int
    bfcl: Bfcl
    profile: FaultProfile
    real: Any
    executed: Executed = field(default_factory=Executed)
    spent: _Spent = field(default_factory=_Spent)
    live: str = field(default_factory=lambda: f"live_{uuid.uuid4().hex}")

    def turn(self, index: int) -> bool:
        """Turn `index`: the agent's run on its prompt; False if it crashed (recorded in `spent`)."""
        self.executed.turns.append([])
        prompt = turn_prompt(self.task, index, self.executed, self.spent.answers)
        step = EvalTask(f"{self.task.id}/{index}", prompt, self.task.plan[index], FINAL_ANSWER)
        clock = SimulatedClock()
        model, tools = self._model_and_tools(step, index, clock)
        try:
            outcome: Outcome = _runners(self.profile, self.real)[self.agent](
                model, tools, step, {"callbacks": [self.spent.counter]}
            )
        except Exception as exc:  # a crash is a measured outcome, whatever its kind
            self.spent.crash = f"crash: {type(exc).__name__}: {truncate(str(exc), 200)}"
            return False
        finally:
            clock.released.set()  # the calls still hanging return
            self.spent.decisions += model.decisions if self.real is None else 0
        self.spent.finishes.append(outcome.finish)
        self.spent.answers.append(outcome.final)
        return True

    def _model_and_tools(self, step: EvalTask, index: int, clock: SimulatedClock) -> tuple[Any, list[BaseTool]]:
        tools = bfcl_tools(self.task, self.executed, self.bfcl, self.live)
        if self.real is not None:
            return _real_model(self.agent, self.real), tools
        shared = zlib.crc32(f"{self.seed}|{self.task.id}|{index}".encode())  # the same draws for every agent
        model = SimulatedModel(
            task=step,
            profile=self.profile,
            seed=shared,
            protocol=protocol_of(self.agent),
            clock=clock,
            meter=self.spent.meter,
        )
        handles, timeout = self.agent in TOOLS_HANDLE_ERRORS, tool_timeout_of(self.agent)
        stats = ToolStats()
        faulty = faulty_tools(tools, self.profile, shared, stats, handle_errors=handles, clock=clock, timeout_s=timeout)
        return model, faulty


def _real_model(agent: str, real: Any) -> Any:
    """The real model as `agent` meets it: the peers call tools natively, so a model that writes its calls as
    text reaches them through the same protocol reinloop uses, read as native calls (`WrittenToolCalls`), their
    prompts held to reinloop's context budget, as the evaluation's real-model runs hold them."""
    if real.protocol == "tool_calling" or agent in REINLOOP_AGENTS:
        return real.model
    from reinloop.protocols import get_protocol
    from reinloop_eval.written_calls import WrittenToolCalls

    protocol = real.decision_protocol or get_protocol(real.protocol)
    budget = real.config.get("context_token_budget")
    return WrittenToolCalls(model=real.model, protocol=protocol, context_token_budget=budget)


def turn_prompt(task: BfclTask, turn: int, executed: Executed, answers: Sequence[str | None]) -> str:
    """The request of `turn`, after a recap of the earlier turns: each request, the calls run with their
    results, and the answer."""
    if turn == 0:
        return task.turns[0]
    lines = [RECAP]
    for earlier in range(turn):
        lines.append(f"- The user asked: {task.turns[earlier]}")
        for function, args, result in executed.turns[earlier]:
            lines.append(f"  You called {call_text(function, args)}: {truncate(result, RECAP_RESULT_CHARS)}")
        answer = answers[earlier] if earlier < len(answers) else None
        lines.append(f"  You answered: {answer or '(no answer)'}")
    return "\n".join([*lines, "", f"Now the user asks: {task.turns[turn]}"])


def _verdict(bfcl: Bfcl, task: BfclTask, executed: Executed) -> tuple[bool, str]:
    """BFCL's checker on the calls `executed`: whether they are right, and BFCL's error type if not."""
    if task.multi_turn:
        result = bfcl.score_multi_turn(f"score_{uuid.uuid4().hex}", task.id, executed.multi_turn_calls(len(task.turns)))
    else:
        result = bfcl.score_ast(task.id, executed.ast_calls())
    valid = bool(result.get("valid"))
    return valid, "" if valid else str(result.get("error_type", "invalid"))
