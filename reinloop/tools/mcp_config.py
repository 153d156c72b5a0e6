"""The MCP client config file, read into langchain-mcp-adapters connections (`load_mcp_config`).

The file is the JSON that MCP clients share (``{"mcpServers": {NAME: {"command": ...} | {"url": ...}}}``).
Every entry is checked as it is read: a problem is a `ConfigurationError` naming the file and the server,
and saying what to change.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reinloop.errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_mcp_adapters.sessions import Connection

# The transports a server entry may name, as the adapters call them ("http" and "streamable-http" are other
# clients' spellings of streamable_http).
URL_TRANSPORTS = {
    "streamable_http": "streamable_http",
    "streamable-http": "streamable_http",
    "http": "streamable_http",
    "sse": "sse",
    "websocket": "websocket",
}
STDIO_KEYS = ("command", "args", "env", "cwd", "transport", "type")
URL_KEYS = ("url", "headers", "transport", "type")
# A ``${VAR}`` reference in an env value, which the adapters expand from this process's environment.
ENV_REFERENCE = re.compile(r"\$\{([^}]+)\}")
CONFIG_SHAPE = (
    '{"mcpServers": {"NAME": {"command": "...", "args": ["..."], "env": {"KEY": "value"}}}}, '
    'or {"url": "https://...", "transport": "streamable_http"} for a server over HTTP'
)


def load_mcp_config(path: str | Path) -> dict[str, Connection]:
    """The servers of an MCP client config file, as langchain-mcp-adapters connections by server name.

    Each entry of ``mcpServers`` is a stdio server (``command``, with optional ``args``, ``env`` and ``cwd``)
    or a remote one (``url``, with ``transport`` streamable_http (the default; ``http`` too), ``sse`` or
    ``websocket``, and optional ``headers``); ``type`` may stand for ``transport``, as some clients write it.
    A stdio server gets the variables mcp passes on (PATH, HOME, ...) and its ``env``, whose ``${VAR}``
    references are filled in from this process's environment. Any problem is a `ConfigurationError` naming
    the file and the server; env values are never shown, since they may be secrets.
    """
    where = Path(path)
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read the MCP config {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"the MCP config {where} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the MCP config {where} is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ConfigurationError(f"the MCP config {where} names no server; write it as {CONFIG_SHAPE}")
    connections = {}
    for name, entry in servers.items():
        try:
            connections[name] = _connection(name, entry)
        except ValueError as exc:
            raise ConfigurationError(f"the MCP config {where}, server {name!r}: {exc}") from None
    return connections


def _connection(name: str, entry: Any) -> Connection:
    """One server entry as a connection; a problem with it is a ValueError saying what to change."""
    if not name.strip():
        raise ValueError("a server needs a name")
    if not isinstance(entry, dict):
        raise ValueError(f"must be a JSON object such as {CONFIG_SHAPE}")
    if ("command" in entry) == ("url" in entry):
        raise ValueError('needs either "command" (a server it starts) or "url" (a running server), not both')
    if "transport" in entry and "type" in entry:
        raise ValueError('give "transport" or "type", not both')
    kind = entry.get("transport", entry.get("type"))
    if "command" in entry:
        _known_keys(entry, STDIO_KEYS)
        if kind not in (None, "stdio"):
            raise ValueError(f'a server with "command" runs over stdio, not {kind!r}: leave "transport" out')
        return _stdio(entry)
    _known_keys(entry, URL_KEYS)
    kind = "streamable_http" if kind is None else kind
    transport = URL_TRANSPORTS.get(kind) if isinstance(kind, str) else None
    if transport is None:
        raise ValueError(f'"transport" must be one of {", ".join(URL_TRANSPORTS)}, got {kind!r}')
    connection: dict[str, Any] = {"transport": transport, "url": _text(entry, "url")}
    if "headers" in entry:
        if transport == "websocket":
            raise ValueError('the websocket transport takes no "headers"')
        connection["headers"] = _text_map(entry, "headers")
    return cast("Connection", connection)


def _stdio(entry: dict[str, Any]) -> Connection:
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValueError('"args" must be a list of strings')
    connection: dict[str, Any] = {"transport": "stdio", "command": _text(entry, "command"), "args": args}
    if "cwd" in entry:
        connection["cwd"] = _text(entry, "cwd")
    if "env" in entry:
        env = _text_map(entry, "env")
        for key, value in env.items():
            # The adapters would start the server with the reference as its literal value, and log the value.
            missing = [ref for ref in ENV_REFERENCE.findall(value) if ref not in os.environ]
            if missing:
                raise ValueError(f"env {key!r} refers to ${{{missing[0]}}}, which is not set in this environment")
        connection["env"] = env
    return cast("Connection", connection)


def _known_keys(entry: dict[str, Any], known: tuple[str, ...]) -> None:
    # An unknown key is refused rather than ignored: a misspelt "args" would start the server without them,
    # and another client's "disabled": true would start a server its user turned off.
    unknown = [key for key in entry if key not in known]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; such an entry takes {', '.join(known)}")


def _text(entry: dict[str, Any], key: str) -> str:
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key!r} must be a non-empty string, got {value!r}")
    return value


def _text_map(entry: dict[str, Any], key: str) -> dict[str, str]:
    """An object of strings (env, headers), whose values are never shown: they may be secrets."""
    value = entry[key]
    if not isinstance(value, dict):
        raise ValueError(f"{key!r} must be a JSON object of strings")
    for name, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{key!r} value {name!r} must be a string, got a {type(item).__name__}")
    return dict(value)
