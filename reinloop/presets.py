"""Presets: the agent loops of the four seed articles, as `AgentConfig`s.

A preset is an `AgentConfig` whose protocol, limits, windows and guards reproduce the loop one seed article
describes (000, 002, 003, 004), as far as reinloop's settings reach; the model, the tools, the checkpointer and
the store stay what you give `build_agent`. Each preset's docstring quotes the seed's numbers behind every
field it sets, says where reinloop's mechanism differs, which fields keep reinloop's defaults because the seed
is silent on them, and which of reinloop's guards stay on. No seed retries a tool in place or has a reflection
or re-plan turn, so every preset sets ``tool_attempts=1``, ``error_reflection=False`` and ``max_replans=0``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from reinloop.config import AgentConfig
from reinloop.errors import ConfigurationError

if TYPE_CHECKING:
    from reinloop.models import ChosenModel

__all__ = [
    "PRESETS",
    "canonical_name",
    "layered_config",
    "preset",
    "preset_protocol",
    "seed_000",
    "seed_002",
    "seed_003",
    "seed_004",
]

# What no seed's loop has: a tool retried in place, a reflection or re-plan turn before a breaker.
_SEED_LOOP: dict[str, object] = {"tool_attempts": 1, "error_reflection": False, "max_replans": 0}
# Compare calls within one decision only: the loop of a seed without a dead-loop rule.
_NO_DEAD_LOOP_RULE = 1


def _no_error_breaker(max_iterations: int) -> int:
    """An error_threshold that an error streak cannot reach within `max_iterations` rounds of a text
    protocol (one call per reply, one error per round at most): the seed's loop goes on after any error."""
    return max_iterations + 1


def seed_000() -> AgentConfig:
    """Seed 000, the hybrid agent: BaseTool with pydantic args, an LRU short-term memory with vector
    summaries, three error layers and a circuit breaker.

    - protocol ``tool_calling``: each tool's args_schema "会被LangChain自动转换成JSON Schema喂给LLM" (is
      turned into a JSON schema for the model).
    - max_iterations 20: ``MAX_ITERATIONS = 20``.
    - error_threshold 3, error_reflection False, max_replans 0: ``ERROR_THRESHOLD = 3``; the loop returns
      "熔断终止" at ``consecutive_errors >= ERROR_THRESHOLD``, with no turn in between.
    - max_parse_retries 1: a JSON parse error "重试1次" (is retried once), the raw reply as the hint.
    - tool_attempts 1: an execution error is fed back, "将错误信息反馈给LLM", not run again in place.
    - memory_capacity 10: "短期记忆限制在10条" (``ShortTermMemory(capacity=10)``, LRU).
    - compress_every 5: "每5条短期记忆合并成一个摘要" (every 5 entries folded into one summary).
    - recall_k 2: "similarity_search取top-2" (needs a store, as the seed's Chroma).
    - loop_window 1: the seed has no dead-loop rule besides its error breaker ("循环失控" is "连续3次相同错误",
      three errors in a row).

    Differs: the seed's prose says three identical errors, its code counts any errors in a row; reinloop counts
    the tools' errors (the repeat guards' refusals aside) and leaves the model's own mistakes (an unreadable
    reply after its retry, an unknown tool, invalid arguments) to max_iterations, each with its feedback; the
    seed asks the model after every success whether the task is done (``llm.should_finish``), reinloop's model
    answers when done; the seed's pseudo-success check (``validate_result``) is a tool's result check in
    reinloop (`reject_empty`), not a config field; its state file is reinloop's checkpoint. Silent, so
    reinloop's defaults: the cut of observations (500) and of thoughts (300), summary_max_chars,
    context_token_budget (the seed measured "1.8K" tokens a round, as no limit), tool_timeout_s,
    model_max_attempts, max_repeats, repeats_after_feedback, repeats_after_cache. Still on: argument
    validation, the tool timeout, the repeat of a call whose latest run succeeded (answered from cache, or, for
    a tool that is not cacheable, refused past max_repeats (2) in one decision), the token budget of a model
    call.
    """
    return AgentConfig(
        protocol="tool_calling",
        max_iterations=20,
        error_threshold=3,
        max_parse_retries=1,
        memory_capacity=10,
        compress_every=5,
        recall_k=2,
        loop_window=_NO_DEAD_LOOP_RULE,
        **_SEED_LOOP,
    )


def seed_002() -> AgentConfig:
    """Seed 002, the minimal agent: ``Action: tool[arg]`` or ``Final Answer:``, a window memory of five
    exchanges, six iterations, tool errors returned as text.

    - protocol ``react``: "请输出 Action: 工具名[参数] 或 Final Answer: 结果".
    - max_iterations 6: ``MAX_ITER = 6`` ("循环上限设为6次").
    - memory_capacity 5: ``ConversationBufferWindowMemory(k=5)`` (five exchanges, one window entry each).
    - max_parse_retries 0: an unreadable reply gets "格式错误" (format error, reply again) and the loop goes
      on to its next iteration, as reinloop's note after an unparsable reply does with no retry.
    - tool_attempts 1: the seed's fix for a timed-out tool retried three times is to return the error as text
      and "让Agent自己决定下一步" (let the agent decide the next step).
    - error_threshold 7 (one above max_iterations), error_reflection False, max_replans 0: "错误写入记忆" but
      "不中断循环" (a tool error is written to memory and does not stop the loop): only MAX_ITER ends it.
    - recall_k 0: no long-term memory, only the window.
    - loop_window 1: no dead-loop rule.

    Differs: reinloop's error streak counts the tools' errors only, and leaves the model's own mistakes (an
    unreadable reply, an unknown tool, invalid arguments) to max_iterations, each with its feedback: no error
    ends the loop either way. The seed's window drops old messages, reinloop folds what leaves it into a
    summary (compress_every keeps its default 5, so a 6-round run folds nothing); the seed returns "LLM调用失败"
    when the model call fails, reinloop retries a transient failure (model_max_attempts 3), as the seed's
    ChatOpenAI client does on its own. The seed's ``timeout=1`` is the weather tool's HTTP timeout, not the
    loop's; its temperature 0 and ``max_tokens=512`` are model settings. Silent, so reinloop's defaults: the
    cut of observations (500) and of thoughts (300), summary_max_chars, context_token_budget, tool_timeout_s.
    Still on: argument validation, the tool timeout and the cut of tool output, the token budget of a model
    call.
    """
    return AgentConfig(
        protocol="react",
        max_iterations=6,
        memory_capacity=5,
        max_parse_retries=0,
        error_threshold=_no_error_breaker(6),
        recall_k=0,
        loop_window=_NO_DEAD_LOOP_RULE,
        **_SEED_LOOP,
    )


def seed_003() -> AgentConfig:
    """Seed 003, AgentLoop: JSON thought/action/action_input, a circular memory of six rounds compressed
    every three, observations cut to 500 characters and thoughts to 300.

    - protocol ``json``: "请输出JSON格式(thought, action, action_input)".
    - max_iterations 5: ``AgentLoop.__init__(..., max_iterations: int = 5)``.
    - memory_capacity 6: ``CircularMemory(capacity=6)`` (one round a slot, as one window entry).
    - observation_max_chars 500: ``observation[:500]`` ("截断到500字符").
    - thought_max_chars 300: ``thought[-300:]``.
    - compress_every 3: "每3轮压缩一次记忆" (memory compressed every third round).
    - max_parse_retries 0: an unreadable reply is not asked again.
    - tool_attempts 1, error_threshold 6 (one above max_iterations), error_reflection False, max_replans 0: a
      tool error becomes the observation ("错误不杀死循环": errors do not kill the loop); only max_iterations ends it.
    - recall_k 0: no long-term memory.
    - loop_window 1: no dead-loop rule.

    Differs: on an unreadable reply the seed "强制回退到" a final answer (ends the run with the parse error as
    its answer), reinloop sends a note and goes on to the next round; the seed keeps the last 300 characters
    of a thought, reinloop the first; the seed summarizes its whole buffer every third round, reinloop folds
    every third entry that leaves the window (none leaves six slots in five rounds, unless over the token
    budget).
    Silent, so reinloop's defaults: summary_max_chars (the body of the seed's ``compress`` is cut in our
    copy), context_token_budget, tool_timeout_s, model_max_attempts. Still on: argument validation, the tool
    timeout, the token budget of a model call.
    """
    return AgentConfig(
        protocol="json",
        max_iterations=5,
        memory_capacity=6,
        observation_max_chars=500,
        thought_max_chars=300,
        compress_every=3,
        max_parse_retries=0,
        error_threshold=_no_error_breaker(5),
        recall_k=0,
        loop_window=_NO_DEAD_LOOP_RULE,
        **_SEED_LOOP,
    )


def seed_004() -> AgentConfig:
    """Seed 004, the loop controller: ``CALL_TOOL(tool, {...})`` or ``FINAL:``, a sliding window of 30
    messages, memory decay past 6000, and a dead-loop breaker on the same tool.

    - protocol ``call_tool``: the seed's regex reads ``CALL_TOOL(tool, {...})``, and an answer
      "以'FINAL:'开头" (starts with FINAL:).
    - max_iterations 10: ``max_iters=10``.
    - memory_capacity 15: ``deque(maxlen=30)``, "最多存30条消息", two a round (the reply and its observation).
    - context_token_budget 6000: "如果总token超过6000" the oldest third of the memory is dropped.
    - loop_key "tool", loop_window 3, max_repeats 2: "连续3轮内同一工具调用超过2次" (the same tool more than
      twice in three rounds), whatever its arguments.
    - repeats_after_feedback 0, repeats_after_cache 0: the seed stops at once, "检测到重复循环" (a repeating
      loop was detected).
    - max_parse_retries 0: a reply without CALL_TOOL or FINAL is not asked again.
    - tool_attempts 1, error_threshold 11 (one above max_iterations), error_reflection False, max_replans 0: a
      failed tool becomes the observation "执行失败", and the prompt says "尝试修正参数重试" (fix the arguments and try
      again); only the iteration limit and the dead-loop rule end the loop.
    - recall_k 0: no long-term memory.

    Differs: the seed stops at the third call of a tool in three rounds. reinloop runs neither that call nor a
    repeat of a success: the second identical call is answered from cache, and after one answer from cache or
    one refusal, the next call of that tool within three decisions ends the run as dead_loop. Three identical
    calls end the run at the third, as in the seed; three calls with different arguments end it one call
    later (the third is refused with feedback, the fourth ends the run); a call of the tool two decisions
    after an answer from cache ends it even with another tool in between. The seed counts characters against
    6000 and drops a third of its memory at once, reinloop counts the tokens of the whole prompt and folds the
    oldest entries into a summary until it fits; the seed takes a reply without CALL_TOOL or FINAL as its
    final answer, reinloop sends a note and goes on to the next round. Silent, so reinloop's defaults: the cut
    of observations (500) and of thoughts (300), compress_every, summary_max_chars, run_token_budget (the seed
    counts ``total_tokens`` without a limit), tool_timeout_s, model_max_attempts, max_tool_attempts (one tool
    run a round with tool_attempts 1). Still on: argument validation, the tool timeout and the cut of tool
    output.
    """
    return AgentConfig(
        protocol="call_tool",
        max_iterations=10,
        memory_capacity=15,
        context_token_budget=6_000,
        loop_key="tool",
        loop_window=3,
        max_repeats=2,
        repeats_after_feedback=0,
        repeats_after_cache=0,
        max_parse_retries=0,
        error_threshold=_no_error_breaker(10),
        recall_k=0,
        **_SEED_LOOP,
    )


# The presets by name, in seed order; the `reinloop` command's --preset choices.
PRESETS: dict[str, Callable[[], AgentConfig]] = {
    "seed-000": seed_000,
    "seed-002": seed_002,
    "seed-003": seed_003,
    "seed-004": seed_004,
}


def canonical_name(name: str) -> str:
    """`name` as `PRESETS` spells it: ``seed_002`` and ``Seed-002`` are ``seed-002``."""
    return name.strip().lower().replace("_", "-")


def preset_protocol(name: str | None) -> str | None:
    """The protocol the preset `name` names; None without a preset (the model's own then applies)."""
    return preset(name).protocol if name else None


def layered_config(name: str | None, chosen: ChosenModel, given: Mapping[str, Any]) -> AgentConfig:
    """An agent's AgentConfig in layers, each over the one before: the fields the preset `name` sets (none
    without one), then `chosen` model's protocol and the settings that suit it, then `given` (command-line
    options or environment settings that were set). What the `reinloop` command and the server build."""
    base = preset(name).model_dump(exclude_unset=True) if name else {}
    return AgentConfig(**{**base, "protocol": chosen.protocol, **chosen.config, **given})


def preset(name: str) -> AgentConfig:
    """The `AgentConfig` of the preset called `name` (``"seed-002"`` or ``"seed_002"``)."""
    make = PRESETS.get(canonical_name(name))
    if make is None:
        raise ConfigurationError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return make()
