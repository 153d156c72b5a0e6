"""current_time and timer: the clock, and a bounded wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY

__all__ = ["CurrentTimeTool", "TimerTool"]

MAX_WAIT_S = 60.0


class CurrentTimeInput(BaseModel):
    timezone: str = Field(
        "UTC", min_length=1, max_length=64, description="An IANA time zone such as 'UTC', 'Europe/Paris'."
    )


class CurrentTimeTool(BaseTool):
    """The current date and time in a time zone."""

    name: str = "current_time"
    description: str = "Get the current date, time and weekday in a time zone."
    args_schema: type[BaseModel] = CurrentTimeInput
    # Its result changes with time: an identical call runs again rather than being answered from cache.
    # It only reads the clock: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"cacheable": False, "retryable": True}}
    )
    now: Callable[[ZoneInfo], datetime] = datetime.now

    def _run(self, timezone: str = "UTC", **_: Any) -> str:
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolException(
                f"unknown time zone {timezone!r}; use an IANA name such as 'UTC', 'Europe/Paris', 'Asia/Shanghai'"
            ) from None
        moment = self.now(zone)
        return f"{moment.isoformat(timespec='seconds')} ({moment.strftime('%A')}, {timezone})"


class TimerInput(BaseModel):
    seconds: float = Field(ge=0, le=MAX_WAIT_S, description=f"How long to wait, 0-{MAX_WAIT_S:g} seconds.")


class TimerTool(BaseTool):
    """Wait a bounded number of seconds, e.g. before checking on something again."""

    name: str = "timer"
    description: str = f"Wait for a number of seconds (at most {MAX_WAIT_S:g}), then return."
    args_schema: type[BaseModel] = TimerInput
    # The wait is the point: an identical call waits again rather than being answered from cache. Waiting
    # has no effect: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"cacheable": False, "retryable": True}}
    )
    sleep: Callable[[float], None] = time.sleep

    def _run(self, seconds: float, **_: Any) -> str:
        if not 0 <= seconds <= MAX_WAIT_S:
            raise ToolException(f"seconds must be between 0 and {MAX_WAIT_S:g}, got {seconds}")
        self.sleep(seconds)
        return f"waited {seconds:g} s"
