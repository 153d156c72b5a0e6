"""Tools: the registry, safe execution with timeouts, result checks, and the seeds' toolset."""

from reinloop.tools.calculator import CalculatorTool
from reinloop.tools.clock import CurrentTimeTool, TimerTool
from reinloop.tools.database import DEFAULT_TABLES, Database, DbInsertTool, DbQueryTool
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
from reinloop.tools.files import FileReadTool, FileWriteTool, Workspace
from reinloop.tools.financial import FinancialDataTool
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
from reinloop.tools.search import LocalCorpusSearch, SearchBackend, SearchHit, WebSearchTool
from reinloop.tools.toolset import default_toolset
from reinloop.tools.translate import TranslateTool
from reinloop.tools.weather import WeatherTool

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
