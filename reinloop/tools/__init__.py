"""Tools: the registry, safe execution with timeouts, and result checks."""

from reinloop.tools.execution import ToolTimeoutError, call_with_timeout, invoke_tool
from reinloop.tools.registry import RegisteredTool, ToolRegistry, as_tool
from reinloop.tools.results import ResultCheck, accept_any, reject_empty, to_observation

__all__ = [
    "RegisteredTool",
    "ResultCheck",
    "ToolRegistry",
    "ToolTimeoutError",
    "accept_any",
    "as_tool",
    "call_with_timeout",
    "invoke_tool",
    "reject_empty",
    "to_observation",
]
