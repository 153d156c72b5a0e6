"""What the agent knows: `AgentState` and the small records it holds.

Everything here is checkpointed, so it stays small and plain: records are JSON-like TypedDicts (any
checkpointer stores them without custom types, and nodes never mutate them), the window of recent messages
is bounded by `compress_memory`, and counters (budgets) live here so that a resumed run keeps them.

The TypedDicts are `typing_extensions.TypedDict`: LangGraph turns them into JSON schemas with pydantic
(`get_output_jsonschema`, LangGraph Server), and pydantic refuses `typing.TypedDict` on Python < 3.12.
"""

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NotRequired, get_args, get_type_hints

from langchain_core.messages import AnyMessage
from langgraph.managed import RemainingSteps
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from typing_extensions import TypedDict

from reinloop._langgraph import DeltaChannel, messages_delta_reducer
from reinloop.errors import InputError
from reinloop.storable import clean_text
from reinloop.text import truncate

__all__ = [
    "FINISH_REASONS",
    "FRESH_BUDGETS",
    "INPUT_ERROR_TEMPLATE",
    "MESSAGES_SNAPSHOT_EVERY",
    "NO_USAGE",
    "RAW_KEPT_CHARS",
    "AgentInput",
    "AgentState",
    "CallCheck",
    "CallRecord",
    "CallUsage",
    "Circuit",
    "Decision",
    "ErrorKind",
    "FinishReason",
    "InDoubtCall",
    "RunState",
    "TokenUsage",
    "ToolOutcome",
    "act",
    "answer",
    "extended",
    "read_input",
    "run_state",
    "runs",
    "stopped",
    "unparsable",
]

# Why a run ended: answered, or the reason of the built-in guard that ended it (`reinloop.guards`, which checks
# at import that the two agree). A guard of your own ends runs with a reason of its own.
FinishReason = Literal[
    "answered",
    "max_iterations",
    "error_streak",
    "dead_loop",
    "token_budget",
    "max_tool_attempts",
    "step_limit",
    "middleware",
]
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)

# Every model-fixable mistake, as recorded in state and reported to the model.
ErrorKind = Literal[
    "parse_error",  # the reply could not be read as a decision
    "unknown_tool",  # the model named a tool that does not exist
    "invalid_args",  # the arguments failed the tool's schema
    "repeated_call",  # the identical call was requested more than max_repeats times recently: not run, feedback
    "repeat_after_feedback",  # the identical call again after it was answered from cache or refused (dead loop)
    "tool_error",  # the tool raised
    "timeout",  # the tool did not finish in time and was abandoned
    "empty_result",  # the tool "succeeded" with an empty or meaningless result (pseudo-success)
    "unknown_outcome",  # a non-idempotent call was in flight when the process died; it is not run again
    "over_budget",  # the run's max_tool_attempts was used up before this call could run
    "rejected",  # a person rejected the call before it ran (`reinloop.approvals`); their reason is the feedback
    "blocked",  # a middleware hook answered the call before it ran (`reinloop.middleware`); its message is the feedback
    "circuit_open",  # the tool's recent calls kept failing: it is not run for a while (`reinloop.guards.tool_circuit`)
]


# decide keeps an unparsable reply's text, which the retry hint quotes back, up to this length.
RAW_KEPT_CHARS = 2_000


class Decision(TypedDict):
    """The model's latest reply, read by the protocol: tool calls, a final answer, or unparsable text; or a
    middleware's stop before or after the model call."""

    kind: Literal["act", "answer", "unparsable", "stop"]
    calls: list[dict[str, Any]]  # LangChain ToolCall dicts when kind == "act"
    answer: str | None  # the final answer when kind == "answer"
    raw: str | None  # the reply text when kind == "unparsable", cut to RAW_KEPT_CHARS
    error: str | None  # why it could not be parsed
    # kind == "stop": a middleware hook ended the run (jump_to "end"); its message (`reinloop.middleware`)
    stop: NotRequired[str]
    # Calls of the reply that an after_model middleware hook answered (a ToolMessage of its own), by call id:
    # they do not run, and the hook's message is their observation. Absent: none.
    blocked: NotRequired[dict[str, str]]


def act(calls: list[dict[str, Any]]) -> Decision:
    return Decision(kind="act", calls=calls, answer=None, raw=None, error=None)


def answer(text: str) -> Decision:
    return Decision(kind="answer", calls=[], answer=text, raw=None, error=None)


def unparsable(raw: str, error: str) -> Decision:
    return Decision(kind="unparsable", calls=[], answer=None, raw=raw, error=error)


def stopped(message: str) -> Decision:
    return Decision(kind="stop", calls=[], answer=None, raw=None, error=None, stop=message)


class CallCheck(TypedDict):
    """One requested tool call after validation: ready to run (`error_kind` None) or rejected and why."""

    call_id: str
    name: str
    args: dict[str, Any]
    signature: str  # tool name + canonical arguments, for the repeat guards (dead loop, answers from cache)
    key: str  # idempotency key: thread id, call number and call id; the same on a re-run after a crash
    attempts: int  # the most runs execute_tool may make of it, retries included; 0 when rejected
    error_kind: ErrorKind | None
    error: str | None  # feedback for the model when rejected
    # The observation of an identical call that succeeded within the dead-loop horizon, sent back (after a note) instead
    # of running this one. Absent or None: the call runs (error_kind None) or was rejected.
    cached: NotRequired[str | None]
    # The result an identical call already had, kept with a call refused as a repeat, so that the repeat guards'
    # record keeps it known while the refusals go on. Absent or None: none known.
    known: NotRequired[str | None]
    # A person's review of a call of a tool that needs approval (`reinloop.approvals`): approved as the model
    # sent it, run with the person's arguments (`args` and `signature` are theirs), or rejected. Absent: no review.
    review: NotRequired[Literal["approved", "edited", "rejected"]]
    # The tool's result may be given again for an identical call (`ToolRegistry`'s cacheable). Absent: not.
    cacheable: NotRequired[bool]


def runs(check: CallCheck) -> bool:
    """Whether execute_tool runs the call: it is valid and was not answered from cache."""
    return check["error_kind"] is None and check.get("cached") is None


class CallRecord(TypedDict):
    """What became of one call of a recent decision: what the repeat guards read (`call_window`)."""

    signature: str
    # The tool called, for the repeat guards keyed on the tool (`AgentConfig.loop_key`). Absent in a record
    # saved before it existed: such a record counts towards its signature only, never towards a tool.
    name: NotRequired[str]
    # ran and succeeded; ran and failed (in a record saved before "invalid" existed: or failed validation);
    # failed validation; answered from cache; refused as a repeat
    outcome: Literal["ok", "failed", "invalid", "cached", "refused"]
    # The observation of a success (ok or cached), or the result a refused repeat already had, for answering an
    # identical call.
    result: str | None


class ToolOutcome(TypedDict):
    """What running one validated call produced: an observation, or an error observation."""

    call_id: str
    name: str
    content: str  # the observation text sent back to the model
    error_kind: ErrorKind | None
    attempts: int  # how often the tool ran for it, retries included (0: not run)
    # It may have had its effect (a timeout or a lost connection, or a process that died while it ran), and its
    # tool is declared not idempotent: an identical call is not run again. Absent: False.
    in_doubt: NotRequired[bool]
    # The tool's artifact (response_format="content_and_artifact", as MCP tools' structured content): kept on
    # the call's ToolMessage for the application, never shown to the model. Absent: none, or not storable.
    artifact: NotRequired[Any]


class Circuit(TypedDict):
    """A tool's circuit after failed calls (`reinloop.guards.tool_circuit`); a tool without one is closed."""

    failures: int  # its calls that failed in a row
    opened: int  # times the circuit opened since the tool last succeeded (0: closed, still counting failures)
    cooldown: int  # decisions it stays open, this time (doubles after a failed trial)
    left: int  # decisions left before a trial call may run (0: closed, or half-open)


class InDoubtCall(TypedDict):
    """A non-idempotent call that was in flight when its process died: it may or may not have had its effect."""

    call_id: str
    name: str
    args: dict[str, Any]
    key: str


class TokenUsage(TypedDict):
    """Tokens used by the model calls of a run (decisions and summaries)."""

    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # Of prompt_tokens, those the provider read from its prompt cache and those it wrote to it, as it reports
    # them (0: none reported). Absent in usage saved before they existed: read as 0.
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]


class CallUsage(TypedDict):
    """One model call's tokens: the provider's report when it gives one, else reinloop's own count."""

    node: str  # the node that made the call
    prompt_tokens: int
    completion_tokens: int
    counted_prompt_tokens: int  # reinloop's tiktoken count of exactly what was sent
    source: Literal["provider", "tiktoken"]
    # Of prompt_tokens, read from and written to the provider's prompt cache. Absent in a saved older call: 0.
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]


NO_USAGE = TokenUsage(
    model_calls=0, prompt_tokens=0, completion_tokens=0, total_tokens=0, cache_read_tokens=0, cache_write_tokens=0
)

# What a fresh budget clears, for a new task on a finished thread and for a resume after a circuit break: the
# run's own counters and outcome, and the iteration and token budgets (None: config.max_iterations). Each guard
# adds its own keys (`Guard.fresh`); `reinloop.guards.fresh_budgets` puts the two together.
FRESH_BUDGETS: dict[str, Any] = {
    "iterations_left": None,
    "parse_retries": 0,
    "reflection": None,
    "replans": 0,
    "final_answer": None,
    "finish_reason": None,
    "usage": NO_USAGE,
}


class AgentInput(BaseModel):
    """What a run starts from: ``{"task": "..."}`` or ``AgentInput(task=...)``; ``None`` continues a saved
    thread. An input that is not a task (missing, blank, not text) is refused with an `InputError` before
    anything is saved. Other keys are ignored, as LangGraph's input schemas ignore them, so that a parent
    graph can pass its own state to the agent as a subgraph."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task: str = Field(strict=True, description="What the agent should do.")

    @field_validator("task")
    @classmethod
    def _has_text(cls, task: str) -> str:
        task = clean_text(task)
        if not task.strip():
            raise ValueError("the task is blank")
        return task


INPUT_ERROR_TEMPLATE = 'invalid agent input: {problems}. Invoke the agent with {{"task": "<what it should do>"}}'


def read_input(value: Any) -> dict[str, Any]:
    """`value` as a run's input, its task cleaned; raises `InputError` saying what is wrong."""
    try:
        return AgentInput.model_validate(value).model_dump()
    except ValidationError as exc:
        problems = "; ".join(_input_problem(error) for error in exc.errors(include_url=False))
        raise InputError(INPUT_ERROR_TEMPLATE.format(problems=problems)) from None


def _input_problem(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "input"
    if error["type"] == "value_error":
        return f"{where}: {error['ctx']['error']}"
    if error["type"] == "missing":
        return f"{where}: missing"
    return f"{where}: {error['msg']} (got {truncate(repr(error['input']), 60)})"


# The window is saved as deltas (LangGraph's `DeltaChannel`): a checkpoint stores no copy of the messages, only
# its step's changes to them (its tasks' writes, which are saved anyway), and every this many changes a full
# copy. Reading a saved step replays the changes since the last copy: at most this many writes, from about 2.4
# times as many checkpoints (a round changes the window two or three times in six steps). 50 halves the bytes a
# round saves and resumes a 3,000-round thread in about 10 ms (benchmarks/RESULTS.md). LangGraph gives
# each message its id before its write is saved, so a replay yields the ids the run saw (compress_memory removes
# messages by id). The reducer is LangGraph's batch form of `add_messages` for this channel.
MESSAGES_SNAPSHOT_EVERY = 50


class AgentState(TypedDict, total=False):
    """The checkpointed state of one thread."""

    # The user's task; written by the input, shown to the model on every decision.
    task: str
    # Short-term window: decisions, tool results and notes; decide/observe append, compress_memory trims.
    messages: Annotated[
        list[AnyMessage], DeltaChannel(messages_delta_reducer, snapshot_frequency=MESSAGES_SNAPSHOT_EVERY)
    ]
    # The latest parsed reply; written by decide every round.
    decision: Decision
    # Correction hint for the next decide after an unparsable reply; set by validate_args, cleared by decide.
    correction: str | None
    # Validation of each call in the latest decision; written by validate_args every round.
    checks: list[CallCheck]
    # Outcomes of this round's executed calls, one per execute_tool task; validate_args resets it.
    tool_results: Annotated[list[ToolOutcome], operator.add]
    # Tool calls validated in this thread so far, numbering their idempotency keys; validate_args counts,
    # never reset.
    calls_seen: int
    # Non-idempotent calls whose outcome is unknown after a crash, for the operator; execute_tool appends.
    in_doubt: Annotated[list[InDoubtCall], operator.add]
    # The calls of each of the last decisions that called tools (the dead-loop horizon), and what became of
    # them; observe appends, a new run or a resume clears, a re-plan turn leaves it.
    call_window: list[list[CallRecord]]
    # The signatures of the run's calls whose outcome is in doubt, of tools declared not idempotent
    # (`ToolOutcome.in_doubt`): an identical call is refused for the rest of the run. observe appends, a new run
    # or a resume clears.
    doubtful_calls: list[str]
    # Decisions since the last real tool success whose every call was answered from what is known (an answer
    # from cache, a refused repeat); observe counts, a real tool success, a new run or a resume clears.
    stalled: int
    # Completed decision rounds; check_finish increments, a new task resets.
    iteration: int
    # Rounds left before max_iterations trips; check_finish counts down, None means a fresh
    # config.max_iterations (a new run, or a resume without extra_iterations).
    iterations_left: int | None
    # Errors since the last real tool success (any kind but refused repeats and the model's own mistakes);
    # observe increments, a real tool success resets; an answer from cache leaves it as it is.
    consecutive_errors: int
    # One line per error of the current streak (the last `error_threshold`), for the reflection turn;
    # observe appends, a real tool success clears.
    streak_errors: list[str]
    # consecutive_errors when the streak's reflection turn was granted, None before; check_finish sets,
    # observe clears with the streak. error_streak trips when the count grows past it.
    reflected_at: int | None
    # Re-plan turns granted in place of an error_streak or dead_loop stop in this run (max_replans);
    # check_finish counts, a fresh budget resets.
    replans: int
    # What failed, shown to the model once at the end of the next prompt (the reflection turn);
    # check_finish sets, decide clears once a reply parses.
    reflection: str | None
    # Parse retries used on the current decision; validate_args increments, a parsed reply resets.
    parse_retries: int
    # The replies of the latest round that could not be read (its retries' included), each an error of the
    # streak; validate_args writes it when the round's reply is parsed or its retries are used up.
    unreadable_replies: int
    # One circuit per tool that failed since its last success (`reinloop.guards.tool_circuit`); its guard's
    # observe writes it. Kept across runs of the thread: a tool that is down stays down until a call succeeds.
    circuits: dict[str, Circuit]
    # Tool runs in this run, retries included, against max_tool_attempts; observe adds, a new run resets.
    tool_attempts: int
    # The answer when finish_reason == "answered"; written by check_finish.
    final_answer: str | None
    # Why the run ended; written by check_finish, None while running.
    finish_reason: FinishReason | None
    # Summaries of entries folded out of the window, most recent last (a few); compress_memory.
    summaries: list[str]
    # One-line digests of entries evicted from the window and not yet folded; compress_memory.
    pending: list[str]
    # Folds so far: numbers the summaries kept in the long-term store; compress_memory.
    folds: int
    # Long-term memories shown in the memory note: decide recalls them when None (a run's first decision, the
    # first after a compaction), compress_memory clears them at each compaction.
    recalled: list[str] | None
    # The tools the model is shown this run (AgentConfig.max_tools), in the registry's order: chosen by decide
    # before a run's first decision; None: all of them.
    tools: list[str] | None
    # Tokens used since the run started or was resumed; decide and compress_memory add, a new run resets.
    usage: TokenUsage
    # The latest model call's tokens; written by decide and compress_memory.
    last_call: CallUsage


class RunState(AgentState, total=False):
    """What the nodes see: the checkpointed state, and what LangGraph computes for the running step. The graph's
    state schema; its output schema is `AgentState`, since nothing here is saved or returned."""

    # LangGraph steps left under the recursion limit this invocation runs with (a managed value, computed
    # for each step); check_finish reads it (step_limit).
    remaining_steps: RemainingSteps


def extended(
    schema: type[Any], schemas: Sequence[type[Any]], skip: frozenset[str] = frozenset(), reasons: Sequence[str] = ()
) -> type[Any]:
    """`schema` with the keys of `schemas` (TypedDicts: the guards' and middleware's own keys) that it does not
    have, but those in `skip`, and with `finish_reason` typed to hold the finish `reasons` of the guards in use
    that are not built in: `schema` itself when there are none. A key `schema` has keeps its type and reducer."""
    hints = get_type_hints(schema, include_extras=True)
    added: dict[str, Any] = {}
    if new := [reason for reason in reasons if reason not in FINISH_REASONS]:
        added["finish_reason"] = Literal[(*FINISH_REASONS, *new)] | None
    for extra in schemas:
        for key, hint in get_type_hints(extra, include_extras=True).items():
            if key not in hints and key not in added and key not in skip:
                added[key] = hint
    if not added:
        return schema
    merged = TypedDict(f"{schema.__name__}With", added, total=False)  # type: ignore[misc]

    class _Extended(schema, merged, total=False):  # type: ignore[misc]
        pass

    _Extended.__name__ = _Extended.__qualname__ = schema.__name__
    return _Extended


def run_state(schema: type[Any]) -> type[Any]:
    """The graph's state schema for `schema` (`AgentState`, or a TypedDict extending it with keys of your own):
    `schema` with `remaining_steps`, as `RunState` is `AgentState` with it."""
    if schema is AgentState:
        return RunState

    class _RunState(schema, total=False):  # type: ignore[misc,call-arg]
        remaining_steps: RemainingSteps

    _RunState.__name__ = _RunState.__qualname__ = f"{schema.__name__}Run"
    return _RunState
