"""Tools from MCP servers, as LangChain tools that reinloop (or any LangChain agent) calls like its own.

`load_mcp_config` reads the JSON file MCP clients share (``{"mcpServers": {NAME: {"command": ...} | {"url":
...}}}``) into langchain-mcp-adapters connections. `MCPTools` opens one session per server for the length of
a `with` block and yields the servers' tools, loaded by the adapters.

The modules: `mcp_config` (the config file) and `mcp_sessions` (`MCPTools`: the servers' sessions on a
private event loop, and their tools, `MCPTool`). Every name is also imported from here.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from reinloop.tools.mcp_config import load_mcp_config
from reinloop.tools.mcp_sessions import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_RESTART_BACKOFF_S,
    DEFAULT_START_TIMEOUT_S,
    MCPTool,
    MCPTools,
)

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_RESTART_BACKOFF_S",
    "DEFAULT_START_TIMEOUT_S",
    "MCPTool",
    "MCPTools",
    "load_mcp_config",
    "open_mcp_tools",
]


def open_mcp_tools(
    stack: ExitStack, config: str | Path, *, tool_name_prefix: bool, tool_timeout_s: float
) -> list[MCPTool]:
    """The tools of the servers in the MCP config file `config`, for an agent whose tool timeout is
    `tool_timeout_s`, their sessions open until `stack` closes: the `reinloop` command's and reinloop.server's."""
    # At least the agent's timeout, whose wait starts first: the agent's timeout is the one that decides.
    call_timeout_s = max(DEFAULT_CALL_TIMEOUT_S, tool_timeout_s)
    return stack.enter_context(MCPTools(config, tool_name_prefix=tool_name_prefix, call_timeout_s=call_timeout_s))
