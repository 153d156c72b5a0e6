"""An MCP server for the tests, run over stdio: `python tests/mcp_server.py`.

Its tools cover what an MCP client meets: typed arguments (`add`), a tool that raises (`fail`), a slow one
(`slow`), an image result (`image`), and the server's process id (`pid`), by which a test tells whether calls
share one server process.
"""

from __future__ import annotations

import asyncio
import base64
import os

from mcp.server.fastmcp import FastMCP, Image

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

server = FastMCP("reinloop-test", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(f"failed on purpose: {reason}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep for some seconds, then say so."""
    # Awaited, so the server answers other calls meanwhile, as one whose call was abandoned must.
    await asyncio.sleep(seconds)
    return f"slept {seconds:g} s"


@server.tool()
def image() -> Image:
    """A tiny PNG image."""
    return Image(data=PNG, format="png")


@server.tool()
def pid() -> int:
    """The process id of this server."""
    return os.getpid()


if __name__ == "__main__":
    server.run("stdio")
