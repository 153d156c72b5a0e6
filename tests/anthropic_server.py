"""An Anthropic Messages API server on 127.0.0.1 that plays a script, for testing ChatAnthropic end to end over
HTTP: it records every request body, as the real API would receive it."""

from __future__ import annotations

import json
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.openai_server import JsonHandler, LoopbackServer


class ScriptedAnthropicServer(LoopbackServer):
    """POST /v1/messages answers from a queue of replies: a string (text) or {"tool": name, "args": {...}}, with
    `usage` (input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens) as set; an
    exhausted script answers HTTP 500. `requests`: every request body."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.usage: dict[str, int] = {"input_tokens": 100, "output_tokens": 10}
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.address

    def _message(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.replies:
            return 500, {"type": "error", "error": {"type": "api_error", "message": "script exhausted"}}
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            content, stop = [{"type": "text", "text": reply}], "end_turn"
        else:
            call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": reply["tool"]}
            content, stop = [{**call, "input": reply["args"]}], "tool_use"
        message = {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude-scripted"), "content": content, "stop_reason": stop,
                   "stop_sequence": None, "usage": dict(self.usage)}  # fmt: skip
        return 200, message

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                self.send_json(*server._message(body))

        return Handler
