"""The agent LangGraph Server serves: `langgraph.json` at the repository root names `make_agent`.

Its model, tools, MCP servers, approvals, preset and `AgentConfig` fields come from ``REINLOOP_*``
environment settings (``REINLOOP_MODEL``, ``REINLOOP_TOOLS``, ``REINLOOP_MCP_CONFIG``, ``REINLOOP_APPROVE``,
``REINLOOP_PRESET``, ``REINLOOP_<FIELD>``, ...), read once, when the server first asks for the graph; the model
is picked as the `reinloop` command picks one (`model_from_settings`). The platform provides the checkpointer
and the store, so the agent is built with ``checkpointer=True`` (given at run time) and no store.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from contextlib import ExitStack
from pathlib import Path

from langchain_core.tools import BaseTool
from pydantic import TypeAdapter, ValidationError

from reinloop.config import AgentConfig
from reinloop.errors import ConfigurationError
from reinloop.graph import CompiledAgent, build_agent
from reinloop.models import ChosenModel, model_from_settings
from reinloop.presets import layered_config, preset_protocol
from reinloop.tools.toolset import default_toolset

__all__ = ["ENV_PREFIX", "agent_from_environment", "config_from_environment", "make_agent"]

ENV_PREFIX = "REINLOOP_"
DEFAULT_WORKSPACE = "reinloop-workspace"
# Read by `model_from_settings`, which also sets the AgentConfig's protocol from it.
_MODEL_SETTINGS = ("model", "base_url", "protocol")

_lock = threading.Lock()
_served: list[CompiledAgent] = []
_resources = ExitStack()  # the embedded model's server and the MCP servers, stopped when the process exits
atexit.register(_resources.close)


async def make_agent() -> CompiledAgent:
    """The graph factory for LangGraph Server: the agent the environment describes, built on the first call.

    Async, so that the first build (which may start the embedded model's server) runs in a worker thread and
    never blocks the server's event loop; every later call returns the same agent.
    """
    if _served:
        return _served[0]
    return await asyncio.to_thread(_serve)


def _serve() -> CompiledAgent:
    with _lock:
        if not _served:
            _served.append(agent_from_environment(_resources))
        return _served[0]


def agent_from_environment(resources: ExitStack) -> CompiledAgent:
    """The agent the ``REINLOOP_*`` settings describe, with no checkpointer or store; what must outlive the
    call (the embedded model's server, the MCP servers) is entered into `resources`, only once the agent is
    built."""
    with ExitStack() as attempt:  # a bad setting stops the embedded model's server and the MCP servers again
        protocol = _setting("protocol") or preset_protocol(_setting("preset"))
        chosen = attempt.enter_context(model_from_settings(_setting("model"), _setting("base_url"), protocol))
        config = config_from_environment(chosen)
        tools = _tools(chosen) + _mcp_tools(attempt, config)
        agent = build_agent(chosen.model, tools, config=config, protocol=chosen.decision_protocol,
                            checkpointer=True, approve=_names("approve", [tool.name for tool in tools]))  # fmt: skip
        resources.enter_context(attempt.pop_all())
    return agent


def config_from_environment(chosen: ChosenModel) -> AgentConfig:
    """The `AgentConfig` for `chosen`: the preset's fields (``REINLOOP_PRESET``), then what suits the model,
    then each ``REINLOOP_<FIELD>`` that is set."""
    fields = set(AgentConfig.model_fields) - set(_MODEL_SETTINGS)
    given = {name: value for name in sorted(fields) if (value := _setting(name)) is not None}
    return layered_config(_setting("preset"), chosen, given)


def _tools(chosen: ChosenModel) -> list[BaseTool]:
    workspace = Path(_setting("workspace") or DEFAULT_WORKSPACE)
    toolset = default_toolset(workspace, model=chosen.model, weather_base_url=_setting("weather_url"))
    by_name = {tool.name: tool for tool in toolset}
    names = _names("tools", list(by_name))
    return toolset if names is None else [by_name[name] for name in names]


def _mcp_tools(attempt: ExitStack, config: AgentConfig) -> list[BaseTool]:
    """The tools of the MCP servers ``REINLOOP_MCP_CONFIG`` names (none when unset), open until `attempt` closes."""
    path = _setting("mcp_config")
    if path is None:
        return []
    from reinloop.tools.mcp import open_mcp_tools

    prefix = _setting("mcp_prefix") or "false"
    try:
        tool_name_prefix = TypeAdapter(bool).validate_python(prefix)
    except ValidationError:
        raise ConfigurationError(f"{ENV_PREFIX}MCP_PREFIX={prefix!r} must be true or false") from None
    return list(open_mcp_tools(attempt, path, tool_name_prefix=tool_name_prefix, tool_timeout_s=config.tool_timeout_s))


def _names(setting: str, known: list[str]) -> list[str] | None:
    """The tool names a comma-separated setting lists (None when unset), each one of `known`."""
    wanted = _setting(setting)
    if wanted is None:
        return None
    names = [name.strip() for name in wanted.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        problem = f"unknown tools {', '.join(map(repr, unknown))}" if unknown else "no tool"
        variable = ENV_PREFIX + setting.upper()
        raise ConfigurationError(f"{variable}={wanted!r} names {problem}; choose from {', '.join(known)}")
    return names


def _setting(name: str) -> str | None:
    """The environment setting for `name` (``REINLOOP_<NAME>``), None when unset or blank."""
    return os.environ.get(ENV_PREFIX + name.upper()) or None
