"""reinloop's exceptions, named for who must act.

Model-fixable mistakes (bad JSON, bad arguments, unknown tools, tool failures) are never exceptions: they are
data in state and observations for the model. These classes are for developers and operators.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigurationError",
    "InputError",
    "InvariantError",
    "PruneError",
    "ReinloopError",
    "ResumeError",
    "ThreadBusyError",
]


class ReinloopError(Exception):
    """Base class of every error reinloop raises on purpose."""


class ConfigurationError(ReinloopError, ValueError):
    """The developer's setup is wrong (config values, tools, model): fix the code or the settings."""


class ResumeError(ReinloopError):
    """A thread cannot be resumed as asked (unknown thread, already answered, hint on a running step)."""


class ThreadBusyError(ReinloopError):
    """Another run is writing the thread (in this process or another): nothing was run or saved; run it again
    once that run has ended. `thread` and `holder` (who runs it, as far as is known) say which."""

    def __init__(self, message: str, *, thread: str = "", holder: str = "") -> None:
        super().__init__(message)
        self.thread, self.holder = thread, holder


class CheckpointError(ReinloopError):
    """The saved state cannot be read: the database file is not LangGraph's (another application's, or no
    database at all), cannot be reached, or holds a damaged checkpoint. Nothing was changed; name another
    database, or restore this one from a backup."""


class PruneError(ReinloopError, LookupError):
    """A checkpoint cannot be marked or unmarked as asked: the thread or checkpoint is not in the database."""


class InputError(ReinloopError, ValueError):
    """The input a run was invoked with is not a valid task: nothing was saved; invoke it again with a task."""


class InvariantError(ReinloopError, RuntimeError):
    """reinloop broke one of its own rules (a tool call without its result, a node reached out of turn): a bug
    in reinloop or in a custom protocol, tool or node; report it with the traceback."""
