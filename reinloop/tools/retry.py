"""Retrying a tool call in place: a call that raised or timed out runs again after an exponential backoff with
jitter, up to its number of attempts, without asking the model.

Only transient failures are retried (`ToolRun.transient`, decided where the call ran by
`reinloop.tools.execution.ResultRules`): a timeout, a crashed worker process, an exception other than a
`ToolException` (or as the tool's `retry_on` says). A ToolException, an error result and an empty result are
the tool's answer, for the model to act on, and validation errors never reach a tool. Each attempt is a
whole `run_tool`: the same arguments, config and idempotency key, its own full timeout, and for a
process-isolated tool its own worker, killed at the deadline. The backoff and its jitter are tenacity's.
`run_with_retries` waits in the caller's thread; `arun_with_retries` is the same policy with tenacity's async
retrying, for the event loop (`arun_tool` attempts, `apause` waits).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    wait_exponential_jitter,
)

from reinloop.drivers import Steps, io
from reinloop.tools.execution import ToolRun, arun_tool, run_tool, tool_steps
from reinloop.tools.registry import RegisteredTool

__all__ = ["Backoff", "arun_with_retries", "retry_steps", "run_with_retries"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before retry n (from 1): `first_s` * 2**(n - 1) plus a jitter of up to `first_s`, at most
    `max_s`."""

    first_s: float
    max_s: float


def pause(seconds: float) -> None:
    """How a retry waits; tests replace it to see the waits without sleeping."""
    time.sleep(seconds)


async def apause(seconds: float) -> None:
    """How a retry waits on the event loop; tests replace it as they replace `pause`."""
    await asyncio.sleep(seconds)


def run_with_retries(
    entry: RegisteredTool,
    args: dict[str, Any],
    timeout_s: float,
    config: RunnableConfig | None,
    *,
    attempts: int,
    backoff: Backoff,
    made: int = 0,
) -> tuple[ToolRun, int]:
    """Run the call up to `attempts` times while it fails transiently; the last run, and how many were made.
    `made` attempts were made already (and failed transiently): the first of these waits its backoff.

    Exceptions that `run_tool` lets through (LangGraph control flow, an interrupt of this thread) end the
    retries and propagate.
    """
    policy = _policy(attempts, backoff, made)
    if made:
        pause(policy["wait"](_Attempt(0)))
    retrying = Retrying(
        **policy,
        # Looked up at each call, so that a test's replacement is used.
        sleep=lambda seconds: pause(seconds),
    )
    run: ToolRun = retrying(run_tool, entry, args, timeout_s, config)
    return run, made + int(retrying.statistics["attempt_number"])


async def arun_with_retries(
    entry: RegisteredTool,
    args: dict[str, Any],
    timeout_s: float,
    config: RunnableConfig | None,
    *,
    attempts: int,
    backoff: Backoff,
    made: int = 0,
) -> tuple[ToolRun, int]:
    """`run_with_retries` on the event loop: the same attempts and backoff, awaited."""
    policy = _policy(attempts, backoff, made)
    if made:
        await apause(policy["wait"](_Attempt(0)))
    retrying = AsyncRetrying(**policy, sleep=lambda seconds: apause(seconds))
    run: ToolRun = await retrying(arun_tool, entry, args, timeout_s, config)
    return run, made + int(retrying.statistics["attempt_number"])


def retry_steps(
    entry: RegisteredTool,
    args: dict[str, Any],
    timeout_s: float,
    config: RunnableConfig | None,
    *,
    attempts: int,
    backoff: Backoff,
) -> Steps[tuple[ToolRun, int]]:
    """The call with its retries as steps for `reinloop.drivers`: the first attempt on its own, and only after
    a transient failure of it the rest with tenacity (`run_with_retries` under `drive`, `arun_with_retries`
    under `adrive`), whose retrying costs about 0.1 ms in a thread and most of an async call's own work."""
    run = yield from tool_steps(entry, args, timeout_s, config)
    if attempts <= 1 or not run.transient:
        return run, 1
    return (
        yield from io(
            lambda: run_with_retries(entry, args, timeout_s, config, attempts=attempts, backoff=backoff, made=1),
            lambda: arun_with_retries(entry, args, timeout_s, config, attempts=attempts, backoff=backoff, made=1),
        )
    )


@dataclass(frozen=True, slots=True)
class _Attempt:
    """What tenacity's wait reads of a retry state: the number of the attempt that just failed."""

    attempt_number: int


def _policy(attempts: int, backoff: Backoff, made: int = 0) -> dict[str, Any]:
    """When tenacity retries and how long it waits, for its sync and async retrying alike, with `made` attempts
    made before tenacity's first: its attempt n is attempt `made` + n, and waits as that one would."""
    wait = wait_exponential_jitter(multiplier=backoff.first_s, max=backoff.max_s, jitter=backoff.first_s)
    return {
        "stop": stop_after_attempt(attempts - made),
        "wait": (lambda state: wait(cast(RetryCallState, _Attempt(state.attempt_number + made)))) if made else wait,
        "retry": retry_if_result(_transient),
        "retry_error_callback": _last_run,
    }


def _transient(run: ToolRun) -> bool:
    return run.transient


def _last_run(state: RetryCallState) -> ToolRun:
    # The attempts ran out: the last failure is the outcome, rather than tenacity's RetryError. tenacity
    # calls this only after an attempt, which set the outcome.
    assert state.outcome is not None
    run: ToolRun = state.outcome.result()
    return run
