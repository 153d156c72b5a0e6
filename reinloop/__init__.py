"""reinloop: a tool-using LLM agent as an explicit LangGraph state machine, with guard rails.

`import reinloop` loads what building and running an agent needs; drawing, pruning, the presets and the seeds'
toolset load when first named."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# First: it checks the private and beta LangGraph names reinloop uses, and fails with the supported versions.
import reinloop._langgraph  # noqa: F401  # isort: skip
from reinloop.checkpoint import open_checkpointer, sqlite_checkpointer
from reinloop.config import AgentConfig
from reinloop.errors import (
    CheckpointError,
    ConfigurationError,
    InputError,
    InvariantError,
    PruneError,
    ReinloopError,
    ResumeError,
    ThreadBusyError,
)
from reinloop.graph import build_agent
from reinloop.guards import Guard, ToolCircuit, disable
from reinloop.protocols import DecisionProtocol, JsonProtocol, ToolCallingProtocol
from reinloop.resume import prepare_resume, resume
from reinloop.state import FINISH_REASONS, AgentInput, AgentState, FinishReason
from reinloop.tools import ToolRegistry, accept_any, idempotency_key, reject_empty

if TYPE_CHECKING:
    from reinloop.drawing import draw
    from reinloop.presets import PRESETS, preset
    from reinloop.pruning import Mark, PruneReport, mark, marks, prune, unmark
    from reinloop.tools.toolset import default_toolset

# Loaded when first named (`__getattr__`).
_LATER = {
    "Mark": "reinloop.pruning",
    "PRESETS": "reinloop.presets",
    "PruneReport": "reinloop.pruning",
    "default_toolset": "reinloop.tools.toolset",
    "draw": "reinloop.drawing",
    "mark": "reinloop.pruning",
    "marks": "reinloop.pruning",
    "preset": "reinloop.presets",
    "prune": "reinloop.pruning",
    "unmark": "reinloop.pruning",
}

__all__ = [
    "FINISH_REASONS",
    "PRESETS",
    "AgentConfig",
    "AgentInput",
    "AgentState",
    "CheckpointError",
    "ConfigurationError",
    "DecisionProtocol",
    "FinishReason",
    "Guard",
    "InputError",
    "InvariantError",
    "JsonProtocol",
    "Mark",
    "PruneError",
    "PruneReport",
    "ReinloopError",
    "ResumeError",
    "ThreadBusyError",
    "ToolCallingProtocol",
    "ToolCircuit",
    "ToolRegistry",
    "accept_any",
    "build_agent",
    "default_toolset",
    "disable",
    "draw",
    "idempotency_key",
    "mark",
    "marks",
    "open_checkpointer",
    "prepare_resume",
    "preset",
    "prune",
    "reject_empty",
    "resume",
    "sqlite_checkpointer",
    "unmark",
]


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
