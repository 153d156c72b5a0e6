"""Running one tool call with a hard wall-clock timeout, sync and async tools alike."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

__all__ = ["ToolTimeoutError", "call_with_timeout", "invoke_tool"]

T = TypeVar("T")


class ToolTimeoutError(TimeoutError):
    """The tool did not return within its time limit; its thread was abandoned."""


def call_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """Run `fn` in a daemon thread and wait at most `timeout_s` seconds for it.

    Python cannot kill a thread, so a hung call is abandoned rather than stopped: it keeps its daemon thread
    until it returns or the process exits, but it no longer blocks the agent (a hung sync tool would
    otherwise hang the loop, and a ThreadPoolExecutor would even block interpreter exit). The context is
    copied so LangGraph's and LangChain's context variables (config, callbacks) reach the tool.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread below
            outcome["error"] = exc
        finally:
            finished.set()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(target,), daemon=True, name="reinloop-tool")
    thread.start()
    if not finished.wait(timeout_s):
        raise ToolTimeoutError(f"no result after {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def invoke_tool(tool: BaseTool, args: dict[str, Any], config: RunnableConfig | None = None) -> Any:
    """Call a LangChain tool synchronously; async-only tools run on their own event loop."""
    if isinstance(tool, StructuredTool) and tool.func is None and tool.coroutine is not None:
        return asyncio.run(tool.ainvoke(args, config))
    return tool.invoke(args, config)
