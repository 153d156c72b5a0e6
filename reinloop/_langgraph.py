"""The one module that touches LangGraph's private and beta names, each checked here at import.

reinloop's promises rest on a few of them: the resuming flag and the scratchpad tell a call in flight at a
crash from one its tool asked to run again (a non-idempotent tool must not run twice), the delta channel keeps
the window's saved bytes flat, and the injected-arguments helper fills tool arguments as LangGraph's ToolNode
does. Each is imported from LangGraph itself, never copied, and checked for the shape reinloop relies on: if
one is missing or has changed, ``import reinloop`` raises ImportError naming the supported versions, instead
of a guard failing open (a renamed resuming flag would let a non-idempotent tool run again after a crash).
The tests (`tests/test_langgraph_names.py`) check the behaviour behind each name.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, get_type_hints

__all__ = [
    "CONFIG_KEY_DURABILITY",
    "CONFIG_KEY_READ",
    "CONFIG_KEY_RESUMING",
    "CONFIG_KEY_RUNTIME",
    "CONFIG_KEY_SCRATCHPAD",
    "DELTA_COUNTERS_KEY",
    "INTERRUPT",
    "SUPPORTED",
    "DeltaChannel",
    "DeltaSnapshot",
    "RunnableCallable",
    "compiled_graph_fields",
    "get_all_injected_args",
    "messages_delta_reducer",
]

# The releases the test suite has run on; pyproject.toml pins the same ranges.
SUPPORTED: Final = "langgraph>=1.2.24,<1.3 with langgraph-checkpoint>=4.3.2,<4.4 and langgraph-prebuilt>=1.1.3,<1.2"


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def unsupported(what: str) -> ImportError:
    """The error `import reinloop` raises when LangGraph lacks `what` or gives it another shape."""
    found = ", ".join(
        f"{name} {_installed(name)}" for name in ("langgraph", "langgraph-checkpoint", "langgraph-prebuilt")
    )
    return ImportError(
        f"reinloop cannot run on the installed LangGraph ({found}): {what}. reinloop supports {SUPPORTED}; "
        f"install those (pip install reinloop brings them), or see the README's 'LangGraph versions' "
        "section to try a newer LangGraph."
    )


try:
    from langgraph._internal._constants import (
        CONFIG_KEY_DURABILITY,
        CONFIG_KEY_READ,
        CONFIG_KEY_RESUMING,
        CONFIG_KEY_RUNTIME,
        CONFIG_KEY_SCRATCHPAD,
        INTERRUPT,
    )
    from langgraph._internal._runnable import RunnableCallable
    from langgraph._internal._scratchpad import PregelScratchpad
    from langgraph.channels import DeltaChannel
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointMetadata
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
    from langgraph.graph.message import _messages_delta_reducer as messages_delta_reducer
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.prebuilt.tool_node import _get_all_injected_args as get_all_injected_args
    from langgraph.pregel import Pregel
except ImportError as exc:
    raise unsupported(f"a name reinloop uses is gone ({exc})") from None


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise unsupported(what)


def _check_shapes() -> None:
    """Each name as reinloop uses it: the config keys are strings LangGraph puts in `configurable`, the
    callables take what reinloop passes them, and the records have the fields reinloop reads."""
    keys = (CONFIG_KEY_DURABILITY, CONFIG_KEY_READ, CONFIG_KEY_RESUMING, CONFIG_KEY_RUNTIME, CONFIG_KEY_SCRATCHPAD)
    _check(all(isinstance(key, str) and key for key in keys), "its run's configurable keys are not strings")
    _check(len(set(keys)) == len(keys), "two of its run's configurable keys are one")
    _check(
        {"func", "afunc", "name", "trace"} <= set(_parameters(RunnableCallable)),
        "RunnableCallable no longer takes func, afunc, name and trace",
    )
    scratchpad = {field.name for field in dataclasses.fields(PregelScratchpad)}
    _check(
        {"resume", "get_null_resume"} <= scratchpad,
        "the task scratchpad no longer holds an interrupt's answers (resume, get_null_resume)",
    )
    _check(
        {"reducer", "snapshot_frequency"} <= set(_parameters(DeltaChannel)),
        "DeltaChannel no longer takes a reducer and a snapshot_frequency",
    )
    # prune rebuilds a delta channel's value from the saver's history of it: the seed and the writes since.
    _check(
        all(callable(getattr(DeltaChannel, name, None)) for name in ("from_checkpoint", "replay_writes", "get"))
        and callable(history := getattr(BaseCheckpointSaver, "get_delta_channel_history", None))
        and {"config", "channels"} <= set(_parameters(history)),
        "a delta channel can no longer be rebuilt from its saved history (get_delta_channel_history, replay_writes)",
    )
    _check(
        getattr(DeltaSnapshot, "_fields", None) == ("value",),
        "a delta channel's stored snapshot is no longer one value",
    )
    _check(len(_parameters(messages_delta_reducer)) == 2, "the batch messages reducer no longer takes two arguments")
    _check(len(_parameters(get_all_injected_args)) == 1, "the injected-arguments helper no longer takes a tool")
    _check(
        DELTA_COUNTERS_KEY in get_type_hints(CheckpointMetadata),
        f"checkpoint metadata has no {DELTA_COUNTERS_KEY!r}",
    )
    # `reinloop.compiled` invokes the agent in LangGraph's v2 form and gives back the v1 result (its interrupts
    # under INTERRUPT, the key LangGraph's v1 invoke puts them under).
    _check(
        INTERRUPT == "__interrupt__" and all("version" in _parameters(m) for m in (Pregel.invoke, Pregel.ainvoke)),
        "invoke no longer takes a version, or no longer gives interrupts under '__interrupt__'",
    )
    _check(
        {"builder", "schema_to_mapper"} <= set(_parameters(CompiledStateGraph))
        and {"nodes", "channels", "checkpointer", "config"} <= set(_parameters(Pregel)),
        "a compiled graph is no longer built from its fields",
    )


# Where LangGraph notes, in a checkpoint's metadata, which channels it saves as deltas (a key of the
# `CheckpointMetadata` TypedDict, checked below).
DELTA_COUNTERS_KEY: Final = "counters_since_delta_snapshot"


def compiled_graph_fields(graph: CompiledStateGraph[Any, Any, Any, Any]) -> dict[str, Any]:
    """The keyword arguments that build `graph` again, as LangGraph's own `copy` and `with_config` rebuild a
    compiled graph (`self.__class__(**self.__dict__)`). `build_agent` rebuilds it as reinloop's subclass, which
    checks every run's input first: LangGraph has no public hook that runs before it saves a run's input, nor a
    way to compile into a subclass."""
    return {key: value for key, value in graph.__dict__.items() if key != "__orig_class__"}


_check_shapes()
