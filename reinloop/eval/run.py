"""Running the suite: five agents on the same tasks, seeds, draws and tools, and the report they produce."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import random
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from reinloop.config import AgentConfig, ProtocolName
from reinloop.eval.simulated import (
    FAULT_MODEL,
    TOOL_TIMEOUT_S,
    FaultProfile,
    Meter,
    SimulatedClock,
    SimulatedModel,
    ToolStats,
    faulty_tools,
    message_tokens,
    summarizer_of,
)
from reinloop.eval.tasks import SUITE, EvalTask
from reinloop.memory.tokens import TOKENS_PER_REPLY, TokenCounter
from reinloop.presets import PRESETS, preset
from reinloop.tools.toolset import default_toolset

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
# The paired comparison: resamples of the bootstrap, and its generator's seed (a fixed one: the same records
# give the same interval every time).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
BUDGET = 20  # rounds each agent is meant to take at most (reinloop's max_iterations, the middleware's call limit)
# Times the re-asking middleware asks again after a malformed reply: reinloop's default max_parse_retries.
REASK_RETRIES = AgentConfig().max_parse_retries
HARD_CAP = 60  # rounds before the evaluation stops an agent that does not stop itself, so that it ends
# Finishes of a run stopped by the evaluation's cap rather than by the agent: the naive loop's, and LangGraph's
# recursion limit on create_agent (set at HARD_CAP rounds). Recorded as outcomes, never as crashes.
HARD_STOPS = ("cap", "recursion_limit")
RAM_FOLDER = "/dev/shm"
# Runs between full garbage collections; every run's young objects are collected after it (see run_task).
FULL_COLLECTION_EVERY = 50
_runs_since_full_collection = 0

METRICS = f"""\
Success: the task's check holds (the answer holds the expected value, and/or the file or the database row
exists). Paired with reinloop: every agent meets the same draws on a task at a seed, so each run of an agent
is paired with reinloop's run on the same task and seed; the runs only reinloop solved, those only the other
solved, and reinloop's success minus the other's with a 95% interval from a paired bootstrap
({BOOTSTRAP_RESAMPLES} resamples of the pairs, seeded). Tokens per successful run (the headline cost): the
prompt and completion tokens of every model call the runs caused (decisions, a decision asked for again,
summaries, the translate tool's calls), over the successful runs. Iterations: the agent's decisions (its
model calls, without those of the translate tool and the summarizers; a decision asked for again counts).
Model calls: every model call. Runs over budget: runs that took more than {BUDGET} rounds, or that the
evaluation had to stop because the agent did not (the naive loop at {HARD_CAP} decisions, create_agent at
LangGraph's recursion limit, set at {HARD_CAP} rounds); reinloop (max_iterations {BUDGET}) and create_agent
with middleware (a model call limit of {BUDGET}) stop themselves. A round is a decision the agent acts on:
for reinloop one of its iterations, for the others a model step; a reply of malformed calls asked for again
within it (reinloop's parse retry, the re-asking middleware) is a decision and a model call but not a
round, for both alike. Wasted tool calls: tool executions that did not serve the task, all executions but
the successful ones counted up to the number of steps in the task's reference plan (so a failed call, a
retry, a repeat, any call beyond the plan counts; a call refused before it runs does not). Prompt tokens:
what the model calls were sent, counted with tiktoken as a provider bills them: the messages (a malformed
call's name and arguments included), and the schemas of the tools bound for native tool calls (each counted
as its JSON, as reinloop's token budget counts them), which every such call sends again; for a preset whose
protocol writes text (json, react, call_tool) the tool list is in its system prompt instead. Completion
tokens: what the calls wrote (text, calls, malformed calls). Tool schema tokens: the schemas' part of the
prompt tokens. Simulated time: the model's latency, the timer's waits and the slow calls' hangs as each
agent waited them (to its tool timeout, or to the end), in simulated seconds; no figure depends on real
time."""

# How ModelCallLimitMiddleware's closing message starts when it ends a run (exit_behavior "end").
CALL_LIMIT_TEXT = "Model call limits exceeded"
REASKING = "create_agent + middleware + re-ask"
AGENTS = ("naive loop", "create_agent", "create_agent + middleware", REASKING, "reinloop")
# The agents whose tools handle their own errors (`handle_tool_error=True`): a tool's exception is an error
# observation, not a crash. The middleware agents' tools raise, so that ToolRetryMiddleware sees the exception
# and retries (after its last retry it answers with an error observation too); the naive loop crashes, as the
# seeds' starting point did.
TOOLS_HANDLE_ERRORS = ("create_agent",)
# The seed articles' loops (`reinloop.presets`), as extra rows: each writes its own protocol's format.
PRESET_AGENTS = tuple(f"preset {name}" for name in PRESETS)


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


# the five agents -------------------------------------------------------------------------------------------


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


def _reinloop(settings: dict[str, Any], protocol: Any = None) -> Runner:
    """reinloop with an AgentConfig of `settings` (and a custom protocol object, if given)."""

    def run(model: BaseChatModel, tools: Sequence[BaseTool], task: EvalTask, config: RunnableConfig) -> Outcome:
        from reinloop import AgentConfig, build_agent

        agent = build_agent(
            model, list(tools), config=AgentConfig(**settings), summary_model=summarizer_of(model), protocol=protocol
        )
        result = agent.invoke({"task": task.prompt}, config)
        return Outcome(result["final_answer"], result["finish_reason"], result["iteration"])

    return run


def _runners(profile: FaultProfile, real: Any = None) -> dict[str, Runner]:
    # Slow calls longer than it hang until the run ends, normal ones take milliseconds (see TOOL_TIMEOUT_S). A
    # preset keeps its own limits but gets this timeout too (no seed sets one), so every row meets the same faults.
    timeout = {"tool_timeout_s": TOOL_TIMEOUT_S}
    if real is None:
        reinloop = _reinloop({"max_iterations": BUDGET, **timeout})
    else:  # a real model: its protocol and limits, and real tool timeouts
        reinloop = _reinloop(
            {"max_iterations": BUDGET, "protocol": real.protocol, **real.config}, real.decision_protocol
        )
    presets = {
        agent: _reinloop({**_preset_of(agent).model_dump(exclude_unset=True), **timeout}) for agent in PRESET_AGENTS
    }
    return {
        "naive loop": _naive,
        "create_agent": _create_agent(lambda model: []),
        "create_agent + middleware": _create_agent(_standard_middleware),
        REASKING: _create_agent(_reasking_middleware),
        "reinloop": reinloop,
        **presets,
    }


@functools.cache  # read for every run of a preset row: its runner and its model's protocol
def _preset_of(agent: str) -> AgentConfig:
    return preset(agent.removeprefix("preset "))


def tool_timeout_of(agent: str) -> float | None:
    """The tool timeout `agent` has in the evaluation: reinloop's and the presets', None for the others."""
    return TOOL_TIMEOUT_S if agent == "reinloop" or agent in PRESET_AGENTS else None


def protocol_of(agent: str) -> ProtocolName:
    """The protocol the simulated model writes for `agent`: a preset's own, native tool calls for the others."""
    return _preset_of(agent).protocol if agent in PRESET_AGENTS else "tool_calling"


class _CallCounter(BaseCallbackHandler):
    """Counts a real model's calls and the tokens of what it is sent and what it writes."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0  # messages and tool schemas
        self.completion_tokens = 0
        self.tool_schema_tokens = 0
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
                    self.completion_tokens += message_tokens(self._counter, [message]) - TOKENS_PER_REPLY


# running --------------------------------------------------------------------------------------------------


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
        tools = default_toolset(workspace, model=model)
        handles = agent in TOOLS_HANDLE_ERRORS
        timeout = tool_timeout_of(agent)
        tools = faulty_tools(tools, profile, shared, stats, handle_errors=handles, clock=clock, timeout_s=timeout)
    else:
        model = real.model
        tools = faulty_tools(default_toolset(workspace, model=model), FaultProfile(tool_fault_rate=0.0), 0, stats)
        if real.protocol != "tool_calling" and agent != "reinloop":
            # The peers call tools natively: they get the model's protocol as native calls (WrittenToolCalls).
            from reinloop.eval.written_calls import WrittenToolCalls
            from reinloop.protocols import get_protocol

            protocol = real.decision_protocol or get_protocol(real.protocol)
            model = WrittenToolCalls(model=real.model, protocol=protocol)
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
        success=not crashed and task.check(workspace, outcome.final),
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
    """Every agent on the first `tasks` tasks, each in its own fresh workspace. With `real` (a
    `reinloop.models.ChosenModel`), that model plays instead of the simulated one, with no injected faults."""
    records = []
    with tempfile.TemporaryDirectory(prefix="reinloop-eval-", dir=_scratch_folder()) as folder:
        for task in SUITE[:tasks]:
            for agent in agents:
                records.append(run_task(agent, task, profile, seed, Path(folder), real))
                if progress:
                    progress(agent, task.id)
    return records


def _scratch_folder() -> str | None:
    """Where the runs' workspaces go: a RAM-backed folder where the system has one, else the default temporary
    folder. The tools sync what they write; on a busy disk a sync could come near reinloop's tool timeout in
    the evaluation (a fault no seed draws), and it made the suite slower by about a third."""
    shm = Path(RAM_FOLDER)
    return RAM_FOLDER if shm.is_dir() and os.access(shm, os.W_OK) else None


def summarize_runs(records: Sequence[RunRecord]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for agent in dict.fromkeys(record.agent for record in records):
        runs = [record for record in records if record.agent == agent]
        successes = sum(r.success for r in runs)
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in runs)
        table[agent] = {
            "runs": len(runs),
            "successes": successes,
            "success_rate": successes / len(runs),
            "tokens_per_success": tokens_per_success(tokens, successes),
            "mean_iterations": statistics.mean(r.decisions for r in runs),
            "model_calls": sum(r.model_calls for r in runs),
            "prompt_tokens": sum(r.prompt_tokens for r in runs),
            "completion_tokens": sum(r.completion_tokens for r in runs),
            "tool_schema_tokens": sum(r.tool_schema_tokens for r in runs),
            "wasted_tool_calls": sum(r.wasted_tool_calls for r in runs),
            "over_budget_runs": sum(r.exceeded_budget for r in runs),
            "crashes": sum(r.crashed for r in runs),
            "sim_s": round(sum(r.sim_s for r in runs), 3),
        }
    return table


BASELINE = "reinloop"  # whom every other agent is paired with


def paired(records: Sequence[RunRecord], agent: str, baseline: str = BASELINE) -> dict[str, float]:
    """`baseline` against `agent` on the runs they share (same task and seed, hence the same draws): the runs
    only the baseline solved (`wins`), only the agent solved (`losses`), the baseline's success minus the
    agent's, and a 95% interval for that difference from a paired bootstrap over the shared runs (resampled
    as pairs, so the faults both met stay matched)."""
    solved = {(r.agent, r.task, r.seed): r.success for r in records}
    keys = [(task, seed) for name, task, seed in solved if name == baseline and (agent, task, seed) in solved]
    diffs = [int(solved[(baseline, *key)]) - int(solved[(agent, *key)]) for key in keys]
    n = len(diffs)
    if n == 0:
        return {"pairs": 0, "wins": 0, "losses": 0, "difference": 0.0, "low": 0.0, "high": 0.0}
    rng = random.Random(BOOTSTRAP_SEED)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    return {
        "pairs": n,
        "wins": diffs.count(1),
        "losses": diffs.count(-1),
        "difference": sum(diffs) / n,
        "low": means[int(0.025 * BOOTSTRAP_RESAMPLES)],
        "high": means[int(0.975 * BOOTSTRAP_RESAMPLES) - 1],
    }


def paired_all(records: Sequence[RunRecord], baseline: str = BASELINE) -> dict[str, dict[str, float]]:
    """`paired` for every agent of `records` but the baseline (none if it did not run)."""
    agents = dict.fromkeys(record.agent for record in records)
    if baseline not in agents:
        return {}
    return {agent: paired(records, agent, baseline) for agent in agents if agent != baseline}


def markdown_paired(comparisons: dict[str, dict[str, float]], baseline: str = BASELINE) -> str:
    """One row per agent: the runs only the baseline solved, those only the agent solved, and the success
    difference with its 95% interval, in percentage points."""
    lines = [
        f"| {baseline} vs | pairs | only {baseline} solved | only the other solved "
        "| success difference | 95% interval (paired bootstrap) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for agent, row in comparisons.items():
        lines.append(
            f"| {agent} | {row['pairs']:.0f} | {row['wins']:.0f} | {row['losses']:.0f} | "
            f"{row['difference'] * 100:+.1f} pp | {row['low'] * 100:+.1f} to {row['high'] * 100:+.1f} pp |"
        )
    return "\n".join(lines)


def tokens_per_success(tokens: float, successes: float) -> float:
    """The headline cost: all tokens of all runs (prompt and completion, every model call) per successful run;
    with no success, all the tokens (as if one run had succeeded)."""
    return round(tokens / max(1, successes), 1)


def markdown_table(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        "| agent | success | tokens per successful run | mean iterations | model calls | prompt tokens "
        "| completion tokens | of which tool schemas | wasted tool calls | runs over budget | crashes "
        "| simulated time (s) |",
        "| --- |" + " ---: |" * 11,
    ]
    for agent, row in summary.items():
        lines.append(
            f"| {agent} | {row['success_rate']:.0%} | {row['tokens_per_success']:,.0f} | "
            f"{row['mean_iterations']:.1f} | {row['model_calls']} | {row['prompt_tokens']:,} | "
            f"{row['completion_tokens']:,} | {row['tool_schema_tokens']:,} | {row['wasted_tool_calls']} | "
            f"{row['over_budget_runs']} | {row['crashes']} | {row['sim_s']:.1f} |"
        )
    return "\n".join(lines)


def write_report(records: Sequence[RunRecord], profile: FaultProfile, seed: int, out: Path) -> dict[str, Any]:
    """report.md, report.json and (with the eval extra's matplotlib) report.png in `out`; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize_runs(records)
    comparisons = paired_all(records)
    settings = {"seed": seed, "tasks": len({r.task for r in records}), "budget": BUDGET, **asdict(profile)}
    data = {"settings": settings, "summary": summary, "paired": comparisons, "runs": [asdict(r) for r in records]}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    text = (
        f"# reinloop evaluation\n\nSettings: {json.dumps(settings)}\n\n{markdown_table(summary)}\n\n"
        f"## Paired with reinloop\n\n{markdown_paired(comparisons)}\n\n"
        f"## Fault model\n\n{FAULT_MODEL}\n\n## Metrics\n\n{METRICS}\n"
    )
    (out / "report.md").write_text(text)
    save_chart(lambda path: _chart(summary, path), out / "report.png")
    return summary


def save_chart(draw: Callable[[Path], None], path: Path) -> bool:
    """`draw(path)`, and whether it could: a chart needs the eval extra's matplotlib, a table does not."""
    try:
        draw(path)
    except ImportError:
        path.unlink(missing_ok=True)
        return False
    return True


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _chart(summary: dict[str, dict[str, float]], path: Path) -> None:
    plt = pyplot()
    agents = list(summary)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.bar(agents, [summary[a]["success_rate"] * 100 for a in agents], color="tab:green")
    left.set_ylabel("success rate (%)")
    left.set_ylim(0, 100)
    right.bar(agents, [summary[a]["mean_iterations"] for a in agents], color="tab:blue")
    right.axhline(BUDGET, color="tab:red", linestyle="--", label=f"budget ({BUDGET})")
    right.set_ylabel("mean iterations")
    right.legend()
    for axes in (left, right):
        axes.tick_params(axis="x", labelrotation=15)
    figure.suptitle("Same tasks, seeds, tools and faults for each agent")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
