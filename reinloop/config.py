"""The agent's build-time settings: limits, windows and protocol.

Frozen and never stored in a checkpoint, so a resumed run uses the settings of the code that resumes it,
while its budgets (counters) come back from the checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from reinloop.errors import ConfigurationError
from reinloop.tools.execution import MAX_TIMEOUT_S, wait_problem

if TYPE_CHECKING:
    from reinloop.bounds import WorstCase

__all__ = [
    "DEFAULT_REPLY_TOKENS",
    "MAX_BACKOFF_S",
    "MAX_ITERATIONS",
    "MAX_PARSE_RETRIES",
    "AgentConfig",
    "Durability",
    "LoopKey",
    "ProtocolName",
    "round_steps",
]

# The built-in protocols, each a class in `reinloop.protocols.PROTOCOLS` (checked when that module loads).
ProtocolName = Literal["tool_calling", "json", "react", "call_tool"]
Durability = Literal["sync", "async", "exit"]
# What the repeat guards count as the same call: the tool with the same canonical arguments, or the tool.
LoopKey = Literal["call", "tool"]

# The most rounds one run (or one resume's fresh budget) may be given. Counts reach the checkpoint (msgpack stores
# 64-bit integers, wider ones fail the step that saves them) and LangGraph's recursion limit (16 steps a round):
# a million rounds keeps both, and budgets derived from them, far inside those ranges, and no real run nears it.
MAX_ITERATIONS = 1_000_000
# More immediate retries of an unparsable reply than this only burn tokens; the bound also bounds the graph
# steps a round can take.
MAX_PARSE_RETRIES = 5
# The longest backoff. A retry waits with time.sleep, which refuses a wait that ends past the monotonic clock's
# limit (`threading.TIMEOUT_MAX` seconds after boot: OverflowError or EINVAL, raised out of the run); half of
# it leaves room for 146 years of uptime.
MAX_BACKOFF_S = MAX_TIMEOUT_S / 2
# The default cap on one model reply. A decision is a tool call (a name, JSON arguments and a line of reasoning,
# which is kept to thought_max_chars, 300) or a short final answer: tens to a few hundred tokens. 1,024 tokens
# (about 4,000 characters of English) leave room for a file written in one call or an answer of a few
# paragraphs, while a runaway stops at a sixth of the memory's default share of the context budget (6,000
# tokens, `reinloop.budget`) instead of filling the model's context (uncapped, llama.cpp's server once generated
# 4,076 tokens, 110 s, for one decision of the embedded model).
DEFAULT_REPLY_TOKENS = 1_024


def round_steps(parse_retries: int) -> int:
    """The most LangGraph steps one round takes with `parse_retries` parse retries: decide and validate_args
    for the first try and every retry, then execute_tool, observe, compress_memory and check_finish."""
    return 2 * (1 + parse_retries) + 4


class AgentConfig(BaseModel):
    """Limits and behaviour of one agent. Invalid values raise `ConfigurationError` naming the field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_iterations: int = Field(
        20, ge=1, le=MAX_ITERATIONS, description="Decision rounds per run before a circuit break."
    )
    error_threshold: int = Field(
        3,
        ge=1,
        description=(
            "Errors of the tools since the last real tool success (not refused repeats, nor the model's own "
            "mistakes: an unreadable reply, an unknown tool, invalid arguments, which max_iterations bounds) that "
            "end the run as error_streak. With error_reflection, reaching it first grants one reflection turn."
        ),
    )
    error_reflection: bool = Field(
        True,
        description=(
            "When the error count first reaches error_threshold, the next decision is shown what failed (one "
            "line per error) and asked for a different approach; error_streak trips only if errors continue. "
            "False: error_streak trips at the threshold."
        ),
    )
    max_replans: int = Field(
        2,
        ge=0,
        description=(
            "Re-plan turns a whole run may get in place of an error_streak or dead_loop stop: the next decision "
            "is shown what kept failing and asked for a new plan. The guards keep what they know (a call whose "
            "result is known is still not run again), so each re-plan buys one round, and the stop comes when "
            "they are used up. 0: the guards stop the run at once."
        ),
    )
    max_parse_retries: int = Field(
        1,
        ge=0,
        le=MAX_PARSE_RETRIES,
        description="Immediate retries of an unparsable reply, each with a correction hint.",
    )
    loop_window: int = Field(
        3,
        ge=1,
        description=(
            "Decisions (the current one included) in which identical calls (same tool, canonical arguments) are "
            "counted for max_repeats. An identical call whose latest outcome within the dead-loop horizon "
            "(loop_window + the larger of repeats_after_feedback and repeats_after_cache decisions) is a success "
            "is answered from cache, not run."
        ),
    )
    max_repeats: int = Field(
        2,
        ge=1,
        description=(
            "Identical calls allowed within loop_window; one more is refused with feedback, not run (the "
            "seeds' dead-loop rule; the breaker waits for repeats_after_feedback). Keyed on the call, it refuses "
            "only a call whose latest run succeeded (a tool with cacheable=False): a failed call runs again, "
            "unless it may have had its effect and its tool is declared idempotent=False."
        ),
    )
    loop_key: LoopKey = Field(
        "call",
        description=(
            "What max_repeats, repeats_after_feedback and repeats_after_cache count as repeats of one call: "
            "'call' the same tool with the same canonical arguments; 'tool' any call of the same tool, whatever "
            "its arguments (seed 004's dead-loop rule: the same tool more than twice in three rounds). An "
            "answer from cache still needs the exact call, but counts towards its tool."
        ),
    )
    repeats_after_feedback: int = Field(
        5,
        ge=0,
        description=(
            "Identical calls still refused within the dead-loop horizon after the model was refused for that "
            "call; one more ends the run as dead_loop."
        ),
    )
    repeats_after_cache: int = Field(
        5,
        ge=0,
        description=(
            "Identical calls still answered from cache within the dead-loop horizon after the first answer "
            "from cache; one more ends the run as dead_loop."
        ),
    )
    max_stalled: int = Field(
        2,
        ge=0,
        description=(
            "Decisions in a row allowed to bring nothing new: every call answered from cache or refused as a "
            "repeat. One more ends the run as dead_loop, whatever order the repeated calls come in."
        ),
    )
    tool_timeout_s: float = Field(
        30.0, gt=0, description="Hard wall-clock limit of one tool call; each retry gets it afresh."
    )
    tool_attempts: int = Field(
        3,
        ge=1,
        description=(
            "Attempts of one tool call, the first included, when it raises or times out; 1 turns retries "
            "off. Retries run in place, without a model call, and only for tools declared safe to repeat "
            "(retryable or idempotent declared True, an MCP readOnlyHint or idempotentHint); any other tool's "
            "call runs once, and its timeout or lost connection is reported to the model as in doubt. One call "
            "with all its retries takes at most tool_attempts * tool_timeout_s plus (tool_attempts - 1) * "
            "tool_backoff_max_s."
        ),
    )
    tool_backoff_s: float = Field(
        0.1,
        ge=0,
        description=(
            "Wait before the first retry of a tool call; doubles on each further retry, plus a random jitter "
            "of up to this much. 0: retry at once."
        ),
    )
    tool_backoff_max_s: float = Field(2.0, ge=0, description="Longest wait before one retry of a tool call.")
    max_tool_attempts: int | None = Field(
        None,
        ge=1,
        description=(
            "Tool runs a whole run may make, retries included; None: tool_attempts per round of the iteration "
            "budget (max_iterations * tool_attempts; after a resume, its rounds and those before). A round's "
            "calls and retries only get what is left, a call beyond it is not run, and the run ends as "
            "max_tool_attempts once it is used up."
        ),
    )
    protocol: ProtocolName = Field("tool_calling", description="How the model states its decisions.")
    system_prompt: str | None = Field(
        None,
        min_length=1,
        description="A system message sent first in every decision (the protocol's format instructions follow "
        "it). None: none beyond those instructions; the guards' feedback tells the model what went wrong.",
    )
    memory_capacity: int = Field(
        10,
        ge=1,
        description=(
            "Window entries (a decision with its results, or a note) the prompt may hold; one more starts a "
            "compaction. Between compactions the window only grows, so a provider's prompt cache reuses it."
        ),
    )
    observation_max_chars: int = Field(500, ge=50, description="Tool results are cut to this length, marked.")
    thought_max_chars: int = Field(300, ge=20, description="The model's reasoning beside a tool call is cut to this.")
    compress_every: int = Field(
        10,
        ge=1,
        description=(
            "Entries a compaction of a full window folds into one summary at once, the oldest first (the newest "
            "entry always stays): the prompt changes before its new messages once per compaction, in between a "
            "provider's cache reuses it."
        ),
    )
    summary_max_chars: int = Field(600, ge=100, description="Length limit of one summary of folded entries.")
    recall_k: int = Field(2, ge=0, description="Long-term memories recalled into each prompt (needs a store).")
    context_token_budget: int | None = Field(
        None,
        ge=500,
        description=(
            "Tokens one model call may be sent: system prompt, tool schemas, task, memory, window. None: the "
            "system prompt and tool schemas plus 6,000 for the task and memory, within the model's input window "
            "(its LangChain profile's max_input_tokens)."
        ),
    )
    max_tools: int | None = Field(
        None,
        ge=1,
        description=(
            "Most tools the model is shown in a run: with more tools than this, the agent's model picks them for "
            "the task in one call before the run's first decision, and the run keeps them (so the tool schemas, "
            "the start of every prompt, stay cached); a call of another tool still runs. None: all tools."
        ),
    )
    run_token_budget: int | None = Field(
        None,
        ge=1,
        description=(
            "Tokens a whole run may use (prompts and replies, as the provider reports them; a reply it reports "
            "no tokens for is counted with tiktoken); None for no limit."
        ),
    )
    max_reply_tokens: int | None = Field(
        DEFAULT_REPLY_TOKENS,
        ge=1,
        description=(
            "Most tokens one model reply may have: a decision (a tool call or a short final answer) or a "
            "summary. build_agent sends it with a model it sets up from a string ('openai:gpt-4o-mini'), as "
            "the provider's output limit (OpenAI: max_completion_tokens; an OpenAI-compatible server, e.g. "
            "OPENAI_BASE_URL: max_tokens as well; Ollama: num_predict); so does the reinloop command "
            "(--model, --base-url), with this default. A model object you pass is used as you built it: give "
            "it its own limit, e.g. ChatOpenAI(max_tokens=N, extra_body={'max_tokens': N}) for a server that "
            "ignores max_completion_tokens (llama.cpp), ChatAnthropic(max_tokens=N), ChatOllama(num_predict=N). "
            "A reply cut at any limit is never acted on: it is an unparsable reply, retried with a hint to "
            "answer shorter. Reasoning models count their hidden reasoning in it: raise it for them. None: no "
            "cap is sent."
        ),
    )
    model_max_attempts: int = Field(
        3, ge=1, description="Attempts of a model call that fails with a transient (network) error."
    )
    model_retry_backoff_s: float = Field(
        0.5, ge=0, description="Wait before the first model retry; doubles on each further retry."
    )
    durability: Durability = Field(
        "sync",
        description=(
            "When LangGraph saves each step: 'sync' before the next step starts (a killed run never re-runs a "
            "call that finished before the last saved step); 'async' while the next step runs (faster, but a "
            "kill can lose finished steps, whose calls then run again); 'exit' only when the run ends. An "
            "explicit durability= given to invoke or stream wins."
        ),
    )
    thread_wait_s: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description=(
            "How long a run waits for its thread while another run writes it (one writer per thread, "
            "`reinloop.lease`); 0 raises ThreadBusyError at once."
        ),
    )

    @field_validator("tool_timeout_s")
    @classmethod
    def _waitable_timeout(cls, seconds: float) -> float:
        return _waitable(seconds, MAX_TIMEOUT_S)

    @field_validator("tool_backoff_s", "tool_backoff_max_s", "model_retry_backoff_s")
    @classmethod
    def _waitable_backoff(cls, seconds: float) -> float:
        return _waitable(seconds, MAX_BACKOFF_S)

    def worst_case(self, context_token_budget: int | None = None) -> WorstCase:
        """The most rounds, decisions, tool runs and tokens each runaway model spends before its guard's stop,
        under these settings and the built-in guards (`reinloop.bounds`); ``print(config.worst_case())``. Each
        model call's prompt counts at `context_token_budget` (an agent's: ``build_agent(...).context_token_budget``)
        or the setting; with neither, the tokens are shown per budget."""
        from reinloop.bounds import worst_case

        return worst_case(self, context_token_budget=context_token_budget)

    def __init__(self, **values: object) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']} (got {err['input']!r})"
                for err in exc.errors()
            )
            raise ConfigurationError(f"invalid AgentConfig: {problems}") from None


def _waitable(seconds: float, most: float) -> float:
    # Checked here, not at the first wait, which would raise OverflowError out of the run.
    if problem := wait_problem(seconds, most):
        raise PydanticCustomError("wait_too_long", problem)
    return seconds
