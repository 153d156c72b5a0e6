"""Running the suite: five agents on the same tasks, seeds, draws and tools, and the report they produce.

This module runs one agent on one task (`run_task`: its model, simulated or real, its tools with their faults,
and what the run measured, a `RunRecord`) and every agent on the suite's tasks (`evaluate_suite`). The agents
are in `agents`, the report in `report`; their names are imported from here as before."""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from reinloop.memory.tokens import TokenCounter
from reinloop.memory.usage import cache_tokens
from reinloop.tools.toolset import default_toolset
from reinloop_eval.agents import (
    AGENTS,
    BUDGET,
    HARD_STOPS,
    PRESET_AGENTS,
    REASKING,
    REINLOOP_AGENTS,
    ReaskAfterMalformedReply,
    _runners,
)
from reinloop_eval.agents import MALFORMED_NOTE as MALFORMED_NOTE
from reinloop_eval.agents import TOOLS_HANDLE_ERRORS as TOOLS_HANDLE_ERRORS
from reinloop_eval.agents import Outcome as Outcome
from reinloop_eval.agents import protocol_of as protocol_of
from reinloop_eval.agents import tool_timeout_of as tool_timeout_of
from reinloop_eval.faults import FaultProfile, runaway_draw
from reinloop_eval.meters import Meter, SimulatedClock, ToolStats, message_tokens, reply_tokens
from reinloop_eval.payments import costly_tools
from reinloop_eval.report import METRICS, paired, pyplot, save_chart, summarize_runs, write_report
from reinloop_eval.report import markdown_paired as markdown_paired
from reinloop_eval.report import markdown_table as markdown_table
from reinloop_eval.report import paired_all as paired_all
from reinloop_eval.report import tokens_per_success as tokens_per_success
from reinloop_eval.simulated import SimulatedModel
from reinloop_eval.tasks import SUITE, EvalTask, tasks_for
from reinloop_eval.tool_faults import faulty_tools

__all__ = [
    "AGENTS",
    "BUDGET",
    "HARD_STOPS",
    "METRICS",
    "PRESET_AGENTS",
    "REASKING",
    "REPORTING_SEEDS",
    "TUNING_SEEDS",
    "ReaskAfterMalformedReply",
    "RunRecord",
    "evaluate_suite",
    "paired",
    "pyplot",
    "save_chart",
    "summarize_runs",
    "write_report",
]

# Seeds 0-8 were used to choose reinloop's defaults (see the README's "Evaluation"); figures are reported on
# other seeds, which no setting was chosen on. The grid's and the command's default seeds are the reporting ones.
TUNING_SEEDS = tuple(range(9))
REPORTING_SEEDS = (100, 101, 102)

RAM_FOLDER = "/dev/shm"
# Runs between full garbage collections; every run's young objects are collected after it (see run_task).
FULL_COLLECTION_EVERY = 50
_runs_since_full_collection = 0


@dataclass
class RunRecord:
    agent: str
    task: str
    seed: int
    success: bool
    decisions: int  # model calls to decide (not the translate tool's or a summarizer's)
    rounds: int  # decisions acted on: reinloop's iterations, the others' model steps (a re-ask is not one)
    model_calls: int  # every model call the run caused: decisions, re-asks, summaries, the translate tool's
    prompt_tokens: int  # what those calls were sent: messages (malformed calls included) and tool schemas
    completion_tokens: int  # what those calls wrote: text, calls, malformed calls
    tool_schema_tokens: int  # the tool schemas' part of prompt_tokens
    tool_calls: int
    wasted_tool_calls: int
    exceeded_budget: bool
    crashed: bool
    finish: str
    sim_s: float  # simulated seconds: the model's latency, the timer's waits, slow calls waited (to a timeout)
    wall_s: float  # real seconds, for information: no figure of the summary depends on it
    # Of prompt_tokens, those a real model's provider reports it read from and wrote to its prompt cache (the
    # simulated model has no cache: 0).
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # The costly faults (`FaultProfile.costly`): payments the task did not ask for (a repeat, a mistyped value
    # sent on: `EvalTask.harmful_executions`), and whether the task was a hopeless one.
    harmful_executions: int = 0
    hopeless: bool = False
    # Whether the run's draw makes its model a runaway once it knows the answer (`FaultProfile.runaway_rate`):
    # the same runs for every agent, whether or not the agent's run got that far.
    runaway: bool = False


class _CallCounter(BaseCallbackHandler):
    """Counts a real model's calls and the tokens of what it is sent and what it writes."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0  # messages and tool schemas
        self.completion_tokens = 0
        self.tool_schema_tokens = 0
        self.cache_read_tokens = 0  # of the prompt tokens, as the provider reports them
        self.cache_write_tokens = 0
        self._counter = TokenCounter()

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.calls += 1
        schemas = self._counter.tools((kwargs.get("invocation_params") or {}).get("tools") or ())
        self.tool_schema_tokens += schemas
        self.prompt_tokens += message_tokens(self._counter, messages[0]) + schemas

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, BaseMessage):
                    self.completion_tokens += reply_tokens(self._counter, message)
                    read, written = cache_tokens(message)
                    self.cache_read_tokens += read
                    self.cache_write_tokens += written


def run_seed(seed: int, task: EvalTask) -> int:
    """The seed of every draw of a run on `task` at `seed`: the agent is not part of it, so that each agent
    meets the same faults at the same decision and the same tool faults at the same tool call."""
    return zlib.crc32(f"{seed}|{task.id}".encode())


def run_task(agent: str, task: EvalTask, profile: FaultProfile, seed: int, folder: Path, real: Any = None) -> RunRecord:
    """One agent on one task. `real`: a `ChosenModel` to use instead of the simulated one (no faults)."""
    workspace = folder / agent.replace(" ", "_").replace("+", "plus") / task.id
    stats = ToolStats()
    counter = _CallCounter()
    clock, meter = SimulatedClock(), Meter()
    if real is None:
        shared = run_seed(seed, task)  # the same draws for every agent
        model: Any = SimulatedModel(
            task=task, profile=profile, seed=shared, protocol=protocol_of(agent), clock=clock, meter=meter
        )
        tools = default_toolset(workspace, model=model) + costly_tools(profile, workspace)
        handles = agent in TOOLS_HANDLE_ERRORS
        timeout = tool_timeout_of(agent)
        tools = faulty_tools(tools, profile, shared, stats, handle_errors=handles, clock=clock, timeout_s=timeout)
    else:
        model = real.model
        # `profile`'s tool faults (a real benchmark's; none in `run_benchmark`), drawn as with the simulated model.
        handles, timeout, shared = agent in TOOLS_HANDLE_ERRORS, tool_timeout_of(agent), run_seed(seed, task)
        tools = default_toolset(workspace, model=model)
        tools = faulty_tools(tools, profile, shared, stats, handle_errors=handles, clock=clock, timeout_s=timeout)
        if real.protocol != "tool_calling" and agent not in REINLOOP_AGENTS:
            # The peers call tools natively: they get the model's protocol as native calls (WrittenToolCalls).
            from reinloop.protocols import get_protocol
            from reinloop_eval.written_calls import WrittenToolCalls

            protocol = real.decision_protocol or get_protocol(real.protocol)
            budget = real.config.get("context_token_budget")  # reinloop's, so every agent has the same
            model = WrittenToolCalls(model=real.model, protocol=protocol, context_token_budget=budget)
    crashed = False
    with _collected_between_runs():
        start = time.perf_counter()
        try:
            outcome = _runners(profile, real)[agent](model, tools, task, {"callbacks": [counter]})
        except Exception as exc:  # a crash is a measured outcome here, whatever its kind
            crashed, outcome = True, Outcome(None, type(exc).__name__)
        finally:
            clock.released.set()  # the calls still hanging return
        wall = time.perf_counter() - start
    decisions = model.decisions if real is None else counter.calls
    rounds = decisions - outcome.reasks if outcome.rounds is None else outcome.rounds
    return RunRecord(
        agent=agent,
        task=task.id,
        seed=seed,
        success=not crashed and _succeeded(task, workspace, outcome),
        decisions=decisions,
        rounds=rounds,
        model_calls=meter.calls if real is None else counter.calls,
        prompt_tokens=meter.prompt_tokens if real is None else counter.prompt_tokens,
        completion_tokens=meter.completion_tokens if real is None else counter.completion_tokens,
        tool_schema_tokens=meter.tool_schema_tokens if real is None else counter.tool_schema_tokens,
        tool_calls=stats.executed,
        wasted_tool_calls=stats.wasted(len(task.plan)),
        exceeded_budget=rounds > BUDGET or outcome.finish in HARD_STOPS,
        crashed=crashed,
        finish=outcome.finish,
        sim_s=round(clock.seconds, 6),
        wall_s=round(wall, 4),
        cache_read_tokens=0 if real is None else counter.cache_read_tokens,
        cache_write_tokens=0 if real is None else counter.cache_write_tokens,
        harmful_executions=task.harmful_executions(workspace),
        hopeless=task.hopeless,
        runaway=real is None and runaway_draw(shared) < profile.runaway_rate,
    )


@contextlib.contextmanager
def _collected_between_runs() -> Iterator[None]:
    """No garbage collection during a run; the run's garbage is collected after it.

    A tool's time limit in the evaluation is real (`TOOL_TIMEOUT_S`), and a full collection in a process
    that has run many agents pauses every thread: when the limit was 0.125 s such a pause timed calls out
    where no fault was drawn. The limit is now far above a normal call's time and a pause, but outcomes
    are to be decided by the seeded draws only, so collection still waits for the run to end: its young
    objects then, the whole heap every `FULL_COLLECTION_EVERY` runs.
    """
    global _runs_since_full_collection
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _runs_since_full_collection += 1
        if _runs_since_full_collection >= FULL_COLLECTION_EVERY:
            _runs_since_full_collection = 0
            gc.collect()
        else:
            gc.collect(1)
        if enabled:
            gc.enable()


def evaluate_suite(
    *,
    profile: FaultProfile,
    seed: int = 0,
    tasks: int = len(SUITE),
    agents: Sequence[str] = AGENTS,
    progress: Callable[[str, str], None] | None = None,
    real: Any = None,
) -> list[RunRecord]:
    """Every agent on the first `tasks` tasks (and, with `profile.costly`, on the costly faults' tasks after
    them: `tasks_for`), each in its own fresh workspace. With `real` (a
    `reinloop.models.ChosenModel`), that model plays instead of the simulated one, with no injected faults."""
    records = []
    with tempfile.TemporaryDirectory(prefix="reinloop-eval-", dir=_scratch_folder()) as folder:
        for task in tasks_for(profile, tasks):
            for agent in agents:
                records.append(run_task(agent, task, profile, seed, Path(folder), real))
                if progress:
                    progress(agent, task.id)
    return records


# How a run ends without a stop of the agent's own that says why: an answer (on a hopeless task, a made-up one),
# a reply create_agent could not read, or the evaluation's caps.
UNTYPED_ENDS = ("answered", "malformed_reply", *HARD_STOPS)


def _succeeded(task: EvalTask, workspace: Path, outcome: Outcome) -> bool:
    """Whether a run that did not crash did its task: the task's check; for a hopeless task, a typed stop (the
    agent ended the run itself, with a finish that says why, not an answer)."""
    if task.hopeless:
        return outcome.finish not in UNTYPED_ENDS
    return task.check(workspace, outcome.final)


def _scratch_folder() -> str | None:
    """Where the runs' workspaces go: a RAM-backed folder where the system has one, else the default temporary
    folder. The tools sync what they write; on a busy disk a sync could come near reinloop's tool timeout in
    the evaluation (a fault no seed draws), and it made the suite slower by about a third."""
    shm = Path(RAM_FOLDER)
    return RAM_FOLDER if shm.is_dir() and os.access(shm, os.W_OK) else None
