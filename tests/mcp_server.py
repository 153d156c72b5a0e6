"""An MCP server for the tests, run over stdio: `python tests/mcp_server.py`.

Its tools cover what an MCP client meets: typed arguments (`add`), a tool that raises (`fail`), a slow one
(`slow`), an image result (`image`), and the server's process id (`pid`, annotated `readOnlyHint`), by which
a test tells whether calls share one server process. `stall` and `stall_idempotent` (annotated
`idempotentHint`) append a line to a ledger file, their effect, then sleep: a test counts the lines to see how
often the server ran them. `crash` records its server's process id the same way, then ends the process
mid-call; `shout` writes a line that is not JSON-RPC to stdout. Flags: `--junk` writes such a line before
serving; `--once PATH` serves only if PATH does not exist, and creates it (a server that cannot start
again), else exits at once.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP, Image
from mcp.types import ToolAnnotations

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


async def _record_and_sleep(ledger: str, seconds: float) -> str:
    with Path(ledger).open("a") as file:
        file.write(f"{os.getpid()}\n")
    await asyncio.sleep(seconds)
    return f"recorded, then slept {seconds:g} s"


@server.tool()
async def stall(ledger: str, seconds: float) -> str:
    """Append a line to the ledger file, then sleep for some seconds."""
    return await _record_and_sleep(ledger, seconds)


@server.tool(annotations=ToolAnnotations(idempotentHint=True))
async def stall_idempotent(ledger: str, seconds: float) -> str:
    """Append a line to the ledger file, then sleep for some seconds; declared safe to repeat."""
    return await _record_and_sleep(ledger, seconds)


@server.tool()
def image() -> Image:
    """A tiny PNG image."""
    return Image(data=PNG, format="png")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pid() -> int:
    """The process id of this server."""
    return os.getpid()


@server.tool()
def crash(ledger: str, attempt: int) -> str:
    """Append this server's process id to the ledger file, then end the process without answering."""
    with Path(ledger).open("a") as file:
        file.write(f"{os.getpid()}\n")
    os._exit(1)


@server.tool()
def shout(words: str) -> str:
    """Write the words to stdout, where only JSON-RPC belongs, then return them."""
    print(words, flush=True)
    return words


if __name__ == "__main__":
    if "--once" in sys.argv:
        once = Path(sys.argv[sys.argv.index("--once") + 1])
        if once.exists():
            sys.exit(1)
        once.touch()
    if "--junk" in sys.argv:
        print("starting the junk server", flush=True)
    server.run("stdio")
