"""A scripted OpenAI-compatible chat server on 127.0.0.1, for testing clients end to end over HTTP."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers with JSON."""

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class ScriptedOpenAIServer:
    """Answers /v1/chat/completions from a queue of replies: a string (text) or {"tool": name, "args": {...}}.
    Records every request body; an exhausted script answers HTTP 500. A request with ``"stream": true`` gets
    the reply as one server-sent chunk."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        handler = self._handler()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        if not self.replies:
            return 500, {"error": {"message": "script exhausted"}}
        reply = self.replies.pop(0)
        message: dict[str, Any] = {"role": "assistant", "content": reply if isinstance(reply, str) else ""}
        if not isinstance(reply, str):
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:8]}",
                    "type": "function",
                    "function": {"name": reply["tool"], "arguments": json.dumps(reply["args"])},
                }
            ]
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop" if isinstance(reply, str) else "tool_calls"}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self.send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                status, payload = server._completion(body)
                if status == 200 and body.get("stream"):
                    self.send_events([_as_chunk(payload)])
                else:
                    self.send_json(status, payload)

            def send_events(self, events: list[dict[str, Any]]) -> None:
                data = b"".join(f"data: {json.dumps(event)}\n\n".encode() for event in events) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion as one streamed chunk: the message as the delta, tool calls indexed."""
    (choice,) = completion["choices"]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(delta["tool_calls"])]
    return {**completion, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}  # fmt: skip
