"""The compiled agent: LangGraph's compiled graph, checking a run's input and recursion limit before LangGraph
saves anything, and holding the thread's lease (one writer per thread, `reinloop.lease`) while a run writes it.
`build_agent` (`reinloop.graph`) makes one; it also knows the agent's guards and what a fresh budget writes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, aclosing, nullcontext
from typing import Any, NamedTuple, TypeAlias

from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, GraphOutput, StateUpdate

from reinloop._langgraph import INTERRUPT, compiled_graph_fields
from reinloop.errors import ConfigurationError, ResumeError
from reinloop.guards import Guard
from reinloop.lease import ahold_thread, hold_thread
from reinloop.state import AgentState, RunState, read_input

__all__ = ["RECURSION_LIMIT_TEMPLATE", "UNKNOWN_THREAD_TEMPLATE", "CompiledAgent", "compiled_agent"]

CompiledAgent: TypeAlias = CompiledStateGraph[RunState, None, Any, AgentState]
"""What `build_agent` returns: a compiled LangGraph graph whose nodes see `RunState` and whose output and
checkpoints are `AgentState`, invoked with an `AgentInput` or its dict (``{"task": ...}``)."""

UNKNOWN_THREAD_TEMPLATE = (
    "thread {thread!r} has no saved state to continue: invoke the agent with a task ({{'task': ...}}), or check "
    "the thread id and the checkpointer"
)
RECURSION_LIMIT_TEMPLATE = (
    "recursion_limit={limit} cannot hold one round of this agent and a circuit break ({steps} LangGraph steps): "
    "invoke it with a recursion_limit of at least {steps}, or none to use the agent's own"
)


def compiled_agent(graph: CompiledAgent, **agent: Any) -> CompiledAgent:
    """`graph` as the agent: see `_Agent` for `agent`'s keywords."""
    return _Agent.of(graph, **agent)


class _Agent(CompiledStateGraph[RunState, None, Any, AgentState]):
    """The compiled agent: LangGraph's graph, with its input and recursion limit checked before LangGraph
    saves anything.

    LangGraph neither validates a graph's input against its input schema nor waits for the first node to
    save it, so a bad task would be saved and leave the thread stuck at decide. Every way to run the graph
    (invoke, batch, stream, events, async, as a subgraph, LangGraph Server) goes through `stream` or
    `astream`: the input is checked there (`read_input`); None (continue a thread) and Commands pass as is.
    So is the recursion limit the run gets: step_limit ends a run gracefully at the end of a round, so the
    limit must hold at least one round and a circuit break (`first_steps`: a fresh run's first node has
    recursion_limit - 1 steps left, so it is `steps_to_stop`).
    """

    def __init__(
        self,
        *,
        first_steps: int,
        thread_wait_s: float,
        guards: tuple[Guard, ...],
        fresh_budgets: dict[str, Any],
        context_token_budget: int,
        **graph: Any,
    ) -> None:
        super().__init__(**graph)
        self.first_steps = first_steps
        self.thread_wait_s = thread_wait_s
        self.guards = guards  # in table order: what ends its runs, with which exit code
        self.fresh_budgets = fresh_budgets  # what `reinloop.resume` writes for a fresh budget
        # The tokens one model call may be sent, as build_agent resolved it (`reinloop.budget`).
        self.context_token_budget = context_token_budget

    @classmethod
    def of(cls, graph: CompiledAgent, **agent: Any) -> _Agent:
        return cls(**agent, **compiled_graph_fields(graph))

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not self._values_only(kwargs):
            return super().invoke(input, config, **kwargs)
        return _as_v1(super().invoke(input, config, **kwargs, version="v2"))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not self._values_only(kwargs):
            return await super().ainvoke(input, config, **kwargs)
        return _as_v1(await super().ainvoke(input, config, **kwargs, version="v2"))

    def _values_only(self, kwargs: dict[str, Any]) -> bool:
        """Whether an `invoke` with `kwargs` returns the state as it is at the end (LangGraph's default: values,
        v1, the whole output), which LangGraph's v2 form gets from the values it streams alone.

        LangGraph's v1 form streams every step's updates as well, only to find the interrupts among them: for
        reinloop's six nodes a round, mapping those updates is about 4% of a round's work. v2 finds the same
        interrupts in the values (both are emitted from the same writes), and `_as_v1` gives back v1's shape."""
        return (
            kwargs.get("stream_mode", "values") == "values"
            and kwargs.get("version", "v1") == "v1"
            and kwargs.get("output_keys") is None
            and self._output_mapper is None  # v2 would coerce the values to a class schema; reinloop's are dicts
        )

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        checked = _checked(input)
        written = self._written(self._holds_a_round(config))
        runs = super().stream(checked, config, **kwargs)
        if written is None:
            return runs
        return _leased(runs, hold_thread(written.saver, written.thread, self.thread_wait_s), written, _continues(input))

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        checked = _checked(input)
        written = self._written(self._holds_a_round(config))
        runs = super().astream(checked, config, **kwargs)
        if written is None:
            return runs
        lease = ahold_thread(written.saver, written.thread, self.thread_wait_s)
        return _aleased(runs, lease, written, _continues(input))

    def hold(self, config: RunnableConfig) -> AbstractContextManager[None]:
        """Hold the thread of `config` for the block: the runs and state updates of that thread inside it (in
        this context) use this lease, and any other run of it, in this process or another, gets
        `ThreadBusyError` (after `thread_wait_s`). For a read followed by writes that must see no other writer
        between them: ``with agent.hold(config): agent.invoke(None, prepare_resume(agent, config))``."""
        written = self._written(merge_configs(self.config, config))
        if written is None:
            return nullcontext()
        return hold_thread(written.saver, written.thread, self.thread_wait_s, shared=True)

    def ahold(self, config: RunnableConfig) -> AbstractAsyncContextManager[None]:
        """`hold` for ``async with``: the lease's database work runs in a worker thread."""
        written = self._written(merge_configs(self.config, config))
        if written is None:
            return nullcontext()
        return ahold_thread(written.saver, written.thread, self.thread_wait_s, shared=True)

    def bulk_update_state(self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]) -> RunnableConfig:
        written = self._written(merge_configs(self.config, config))
        if written is None:
            return super().bulk_update_state(config, supersteps)
        with hold_thread(written.saver, written.thread, self.thread_wait_s):
            return super().bulk_update_state(config, supersteps)

    async def abulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        written = self._written(merge_configs(self.config, config))
        if written is None:
            return await super().abulk_update_state(config, supersteps)
        async with ahold_thread(written.saver, written.thread, self.thread_wait_s):
            return await super().abulk_update_state(config, supersteps)

    def _written(self, merged: RunnableConfig) -> _Written | None:
        """The saver and thread a run with `merged` (its config merged with the agent's) writes, when it must
        hold the thread's lease (`reinloop.lease`): not without a saver of its own (none, or LangGraph Server's,
        given at run time, whose run queue already runs one run of a thread at a time), nor as a subgraph,
        whose parent's run writes the thread."""
        configurable = merged.get("configurable") or {}
        thread = configurable.get("thread_id")
        if (
            not isinstance(self.checkpointer, BaseCheckpointSaver)
            or configurable.get("checkpoint_ns")
            or thread is None
        ):
            return None
        return _Written(self.checkpointer, str(thread), merged)

    def _holds_a_round(self, config: RunnableConfig | None) -> RunnableConfig:
        """`config` merged with the agent's own, once its recursion limit is found to hold a round."""
        merged = merge_configs(self.config, config)
        limit = ensure_config(merged)["recursion_limit"]
        if limit < self.first_steps:
            raise ConfigurationError(RECURSION_LIMIT_TEMPLATE.format(limit=limit, steps=self.first_steps))
        return merged


class _Written(NamedTuple):
    saver: BaseCheckpointSaver[Any]
    thread: str
    config: RunnableConfig


def _leased(
    runs: Iterator[Any], lease: AbstractContextManager[None], written: _Written, continues: bool
) -> Iterator[Any]:
    """`runs`, run while holding the thread's `lease`; a run that continues the thread needs it saved."""
    with lease:
        if continues:
            _must_be_saved(written.saver.get_tuple(written.config), written.thread)
        yield from runs


async def _aleased(
    runs: AsyncIterator[Any], lease: AbstractAsyncContextManager[None], written: _Written, continues: bool
) -> AsyncIterator[Any]:
    """`_leased` under astream."""
    async with lease, aclosing(runs):  # type: ignore[type-var]
        if continues:
            _must_be_saved(await written.saver.aget_tuple(written.config), written.thread)
        async for chunk in runs:
            yield chunk


def _continues(input: Any) -> bool:
    """Whether a run with `input` continues a saved thread rather than starting a task."""
    return input is None or isinstance(input, Command)


def _must_be_saved(saved: CheckpointTuple | None, thread: str) -> None:
    # LangGraph would raise its EmptyInputError ("Received no input for __start__"), which names no thread.
    if saved is None:
        raise ResumeError(UNKNOWN_THREAD_TEMPLATE.format(thread=thread))


def _as_v1(output: GraphOutput[Any]) -> Any:
    """What LangGraph's v1 `invoke` returns for the run whose v2 `invoke` gave `output`: the latest values, with
    the interrupts as a list under `__interrupt__` when there are any."""
    if not output.interrupts:
        return output.value
    interrupts = list(output.interrupts)
    return {**output.value, INTERRUPT: interrupts} if isinstance(output.value, dict) else {INTERRUPT: interrupts}


def _checked(input: Any) -> Any:
    return input if _continues(input) else read_input(input)
