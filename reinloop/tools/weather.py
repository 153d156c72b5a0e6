"""weather: current weather for a city from an HTTP service, with a timeout.

The service is any HTTP endpoint that answers ``GET {base_url}/weather?city=NAME`` with a JSON object
(for example ``{"city": "Paris", "temperature_c": 18.5, "condition": "cloudy"}``). A timeout, an unreachable
service or a server error is a tool error the model sees, never a crash.
"""

from __future__ import annotations

from typing import Any

import httpx
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY

__all__ = ["WeatherTool"]


class WeatherInput(BaseModel):
    city: str = Field(min_length=1, max_length=80, description="The city, e.g. 'Paris' or 'Shanghai'.")


class WeatherTool(BaseTool):
    """Current weather for a city."""

    name: str = "weather"
    description: str = "Get the current weather (temperature in Celsius and conditions) for a city."
    args_schema: type[BaseModel] = WeatherInput
    # Its result changes with time: an identical call runs again rather than being answered from cache.
    # A GET: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"cacheable": False, "retryable": True}}
    )
    base_url: str
    timeout_s: float = Field(5.0, gt=0)

    def _run(self, city: str, **_: Any) -> dict[str, Any]:
        url = f"{self.base_url.rstrip('/')}/weather"
        try:
            response = httpx.get(url, params={"city": city}, timeout=self.timeout_s)
        except httpx.TimeoutException:
            raise ToolException(f"the weather service did not answer within {self.timeout_s:g} s; try later") from None
        except httpx.HTTPError as exc:
            raise ToolException(f"cannot reach the weather service ({type(exc).__name__}); try later") from None
        if response.status_code == 404:
            raise ToolException(f"no weather data for {city!r}; check the city name")
        if response.status_code >= 500:
            raise ToolException(f"the weather service failed (HTTP {response.status_code}); try later")
        if response.status_code >= 400:
            raise ToolException(f"the weather service refused the request (HTTP {response.status_code})")
        try:
            data = response.json()
        except ValueError:
            raise ToolException("the weather service answered with something that is not JSON") from None
        if not isinstance(data, dict):
            raise ToolException("the weather service answered with an unexpected format")
        return data
