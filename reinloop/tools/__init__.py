"""Tools: the registry, safe execution with timeouts, result checks, and the seeds' toolset (loaded when first
named: a program that brings its own tools never imports them)."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from reinloop.tools.effects import EffectLedger, idempotency_key
from reinloop.tools.execution import (
    ISOLATIONS,
    Isolation,
    ToolExitError,
    ToolRun,
    ToolTimeoutError,
    acall_with_timeout,
    arun_tool,
    call_with_timeout,
    invoke_tool,
    is_async_tool,
    run_tool,
)
from reinloop.tools.registry import RegisteredTool, ToolRegistry, as_tool
from reinloop.tools.results import (
    ResultCheck,
    UnshowableResultError,
    accept_any,
    describe_error,
    reject_empty,
    result_text,
    to_observation,
)

if TYPE_CHECKING:
    from reinloop.tools.calculator import CalculatorTool
    from reinloop.tools.clock import CurrentTimeTool, TimerTool
    from reinloop.tools.database import DEFAULT_TABLES, Database, DbInsertTool, DbQueryTool
    from reinloop.tools.files import FileReadTool, FileWriteTool, Workspace
    from reinloop.tools.financial import FinancialDataTool
    from reinloop.tools.search import LocalCorpusSearch, SearchBackend, SearchHit, WebSearchTool
    from reinloop.tools.toolset import default_toolset
    from reinloop.tools.translate import TranslateTool
    from reinloop.tools.weather import WeatherTool

# The seeds' toolset, by name: imported on first use (`__getattr__`).
_SEED_TOOLS = {
    "CalculatorTool": "reinloop.tools.calculator",
    "CurrentTimeTool": "reinloop.tools.clock",
    "DEFAULT_TABLES": "reinloop.tools.database",
    "Database": "reinloop.tools.database",
    "DbInsertTool": "reinloop.tools.database",
    "DbQueryTool": "reinloop.tools.database",
    "FileReadTool": "reinloop.tools.files",
    "FileWriteTool": "reinloop.tools.files",
    "FinancialDataTool": "reinloop.tools.financial",
    "LocalCorpusSearch": "reinloop.tools.search",
    "SearchBackend": "reinloop.tools.search",
    "SearchHit": "reinloop.tools.search",
    "TimerTool": "reinloop.tools.clock",
    "TranslateTool": "reinloop.tools.translate",
    "WeatherTool": "reinloop.tools.weather",
    "WebSearchTool": "reinloop.tools.search",
    "Workspace": "reinloop.tools.files",
    "default_toolset": "reinloop.tools.toolset",
}

__all__ = [
    "DEFAULT_TABLES",
    "ISOLATIONS",
    "CalculatorTool",
    "CurrentTimeTool",
    "Database",
    "DbInsertTool",
    "DbQueryTool",
    "EffectLedger",
    "FileReadTool",
    "FileWriteTool",
    "FinancialDataTool",
    "Isolation",
    "LocalCorpusSearch",
    "RegisteredTool",
    "ResultCheck",
    "SearchBackend",
    "SearchHit",
    "TimerTool",
    "ToolExitError",
    "ToolRegistry",
    "ToolRun",
    "ToolTimeoutError",
    "TranslateTool",
    "UnshowableResultError",
    "WeatherTool",
    "WebSearchTool",
    "Workspace",
    "acall_with_timeout",
    "accept_any",
    "arun_tool",
    "as_tool",
    "call_with_timeout",
    "default_toolset",
    "describe_error",
    "idempotency_key",
    "invoke_tool",
    "is_async_tool",
    "reject_empty",
    "result_text",
    "run_tool",
    "to_observation",
]


def __getattr__(name: str) -> Any:
    module = _SEED_TOOLS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
