"""Continuing a saved thread: after a circuit break with a fresh budget, or after a crash where it stopped."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeAlias, cast

import httpx
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import StateSnapshot

from reinloop.config import MAX_ITERATIONS
from reinloop.errors import ConfigurationError, ResumeError
from reinloop.graph import CHECK_FINISH, CompiledAgent, recursion_limit
from reinloop.guards import DEFAULT_GUARDS, fresh_budgets
from reinloop.state import FRESH_BUDGETS

__all__ = ["HINT_TEMPLATE", "Resumable", "prepare_resume", "resume"]

HINT_TEMPLATE = "Hint from the operator, who resumed this run after it stopped: {hint}"

Resumable: TypeAlias = CompiledAgent | RemoteGraph
"""An agent `build_agent` made, or one served by LangGraph Server reached through a `RemoteGraph`."""


def resume(
    agent: Resumable,
    config: RunnableConfig,
    *,
    extra_iterations: int | None = None,
    hint: str | None = None,
    **invoke_kwargs: Any,
) -> dict[str, Any]:
    """Continue the thread in `config` and return its final state (see `prepare_resume`), holding the thread
    from the read of where it stopped to the end of the run: another writer gets `ThreadBusyError`."""
    with _held(agent, config):
        final: dict[str, Any] = agent.invoke(
            None, prepare_resume(agent, config, extra_iterations=extra_iterations, hint=hint), **invoke_kwargs
        )
    return final


def _held(agent: Resumable, config: RunnableConfig) -> AbstractContextManager[None]:
    """The thread's lease for the block (the agent's `hold`); none for a `RemoteGraph`, whose server runs one
    run of a thread at a time itself."""
    hold = getattr(agent, "hold", None)
    return nullcontext() if hold is None else cast("AbstractContextManager[None]", hold(config))


def prepare_resume(
    agent: Resumable,
    config: RunnableConfig,
    *,
    extra_iterations: int | None = None,
    hint: str | None = None,
) -> RunnableConfig:
    """Make the thread in `config` ready to continue, and return the config to run it with:
    ``agent.invoke(None, prepared)`` or ``agent.stream(None, prepared)``.

    A thread that ended in a circuit break gets fresh budgets (`extra_iterations` rounds, by default the
    agent's `max_iterations`, and a new `run_token_budget` and `max_tool_attempts`), cleared error and loop
    counters, and the optional `hint` as a message to the model. A thread interrupted mid-step (a crash)
    continues where its checkpoint stopped, like ``agent.invoke(None, config)``; completed tool calls are not
    run again. Run it inside ``with agent.hold(config):`` (as `resume` does), so that no other writer comes
    between the read of the thread and the run.

    `agent` may be a `RemoteGraph` of an agent on LangGraph Server: the thread is read and updated there.
    """
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        raise ResumeError('config needs the thread to resume: {"configurable": {"thread_id": ...}}')
    if extra_iterations is not None and not 1 <= extra_iterations <= MAX_ITERATIONS:
        raise ConfigurationError(
            f"extra_iterations must be at least 1 and at most {MAX_ITERATIONS:,} (reinloop.config.MAX_ITERATIONS), "
            f"got {extra_iterations!r}"
        )
    snapshot = _saved(agent, config, thread_id)
    values = snapshot.values
    if not values:
        raise ResumeError(f"no saved state for thread {thread_id!r}")
    if snapshot.next:
        if hint is not None or extra_iterations is not None:
            raise ResumeError(
                f"thread {thread_id!r} stopped mid-step (at {', '.join(snapshot.next)}), not at a circuit "
                "break; resume it without hint or extra_iterations"
            )
        return _covering(config, agent, values.get("iterations_left"))
    reason = values.get("finish_reason")
    if reason == "answered":
        raise ResumeError(f"thread {thread_id!r} is already answered; invoke it with a new task instead")
    if reason is None:
        raise ResumeError(f"thread {thread_id!r} has not run yet; invoke it with a task")
    # The guards' own keys: an agent built here knows its guards; a RemoteGraph's are taken to be the built-in ones.
    fresh = getattr(agent, "fresh_budgets", None) or fresh_budgets(DEFAULT_GUARDS, FRESH_BUDGETS)
    update: dict[str, Any] = {**fresh, "iterations_left": extra_iterations, "correction": None}
    if hint:
        update["messages"] = [HumanMessage(HINT_TEMPLATE.format(hint=hint))]
    resumed = agent.update_state(config, update, as_node=CHECK_FINISH)
    return _covering(
        {**config, **resumed, "configurable": {**config.get("configurable", {}), **resumed["configurable"]}},
        agent,
        extra_iterations,
    )


def _saved(agent: Resumable, config: RunnableConfig, thread_id: str) -> StateSnapshot:
    try:
        return agent.get_state(config)
    except ValueError as exc:  # no checkpointer
        raise ResumeError(f"cannot resume thread {thread_id!r}: {exc}") from None
    except httpx.HTTPStatusError as exc:  # from a RemoteGraph: 404 is an unknown thread
        if exc.response.status_code != httpx.codes.NOT_FOUND:
            raise
        raise ResumeError(f"no saved state for thread {thread_id!r} on the server") from None
    except TypeError:
        # RemoteGraph.get_state (langgraph 1.2) fails reading a thread that exists but has no checkpoint yet.
        if not isinstance(agent, RemoteGraph):
            raise
        raise ResumeError(f"thread {thread_id!r} has not run yet; invoke it with a task") from None


def _covering(config: RunnableConfig, agent: Resumable, rounds: int | None) -> RunnableConfig:
    """`config` with a recursion limit that lets `rounds` more rounds run (None: the agent's own budget)."""
    if rounds is None or "recursion_limit" in config:
        return config
    return {**config, "recursion_limit": max(recursion_limit(rounds), (agent.config or {}).get("recursion_limit", 0))}
