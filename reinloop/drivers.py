"""One logic, two drivers: code that waits on I/O is written once, as a generator of the I/O it needs.

A node that calls the model, the store or a tool (decide, compress_memory, execute_tool) keeps its logic in one
generator: it yields an `Io` for each wait (`reply = yield from invoke(model, prompt)`) and returns its
update. `drive` runs such a generator under `invoke`/`stream`, calling each `Io`'s sync form in the calling
thread; `adrive` runs the very same generator under `ainvoke`/`astream`, awaiting each `Io`'s async form on
the event loop. What the I/O raised is thrown back into the generator at its `yield`, so the logic's own
``try``/``except`` (a failing summarizer falling back, a tool's timeout becoming an observation) is the same
under both drivers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeAlias, TypeVar

from langchain_core.runnables import Runnable

__all__ = ["Io", "Steps", "adrive", "drive", "invoke", "io"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Io(Generic[T]):
    """One wait on the outside world, in its two forms: the same call, blocking or awaitable."""

    run: Callable[[], T]
    arun: Callable[[], Awaitable[T]]


Steps: TypeAlias = Generator[Io[Any], Any, R]
"""Logic that yields the I/O it waits on and returns an `R`: run it with `drive` or `adrive`."""


def io(run: Callable[[], T], arun: Callable[[], Awaitable[T]]) -> Steps[T]:
    """Wait on one call, given in its sync and async forms: ``value = yield from io(run, arun)``."""
    value: T = yield Io(run, arun)
    return value


def invoke(runnable: Runnable[Any, T], input: Any, **kwargs: Any) -> Steps[T]:
    """Invoke a LangChain runnable (a chat model; `kwargs` go to its call): `invoke` under `drive`, `ainvoke`
    under `adrive`."""
    return io(partial(runnable.invoke, input, **kwargs), partial(runnable.ainvoke, input, **kwargs))


def drive(steps: Steps[R]) -> R:
    """Run `steps` to its result, doing each wait in this thread."""
    try:
        request = next(steps)
        while True:
            try:
                value = request.run()
            except BaseException as exc:  # thrown back where it was asked for: the logic handles it or not
                request = steps.throw(exc)
            else:
                request = steps.send(value)
    except StopIteration as stop:
        result: R = stop.value
        return result


async def adrive(steps: Steps[R]) -> R:
    """Run `steps` to its result, awaiting each wait on the running event loop."""
    try:
        request = next(steps)
        while True:
            try:
                value = await request.arun()
            except BaseException as exc:  # cancellation included: the logic's finally clauses run
                request = steps.throw(exc)
            else:
                request = steps.send(value)
    except StopIteration as stop:
        result: R = stop.value
        return result
