"""OpenAI-compatible chat servers on 127.0.0.1, for testing clients end to end over HTTP: one that plays a
script, and one whose model never stops generating unless the request caps it."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


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


class LoopbackServer:
    """An HTTP server on a free port of 127.0.0.1, serving `_handler()` in a thread for the length of a `with`
    block; `requests` is for the request bodies a subclass records."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        # A short poll: shutdown() waits for it, at every test's teardown.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class _ChatServer(LoopbackServer):
    """/v1/models lists `model_id`; /v1/chat/completions answers with `_completion(body)`. Records every request
    body. A request with ``"stream": true`` gets the reply as one server-sent chunk."""

    model_id = "scripted"

    @property
    def base_url(self) -> str:
        return f"{self.address}/v1"

    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self.send_json(200, {"object": "list", "data": [{"id": server.model_id, "object": "model"}]})
                else:
                    self.send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
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


class ScriptedOpenAIServer(_ChatServer):
    """Answers /v1/chat/completions from a queue of replies: a string (text) or {"tool": name, "args": {...}}.
    An exhausted script answers HTTP 500. `cached_tokens`: of each reply's 100 prompt tokens, those its usage
    says the cache served (`prompt_tokens_details.cached_tokens`)."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[Any] = []
        self.cached_tokens = 0

    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.replies:
            return 500, {"error": {"message": "script exhausted"}}
        reply = self.replies.pop(0)
        message: dict[str, Any] = {"role": "assistant", "content": reply if isinstance(reply, str) else ""}
        if not isinstance(reply, str):
            message["tool_calls"] = [_tool_call(reply["tool"], reply["args"])]
        finish = "stop" if isinstance(reply, str) else "tool_calls"
        usage: dict[str, Any] = {"prompt_tokens": 100, "completion_tokens": 10}
        if self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return 200, _completion(body, message, finish, usage)


class RunawayOpenAIServer(_ChatServer):
    """A model that never stops generating: every reply runs until the cap the request carries (the smaller of
    max_tokens and max_completion_tokens), one token a word, and ends with finish_reason "length". Without a
    cap it runs to UNCAPPED_CHARS characters: a client that sends none gets an enormous reply, bounded so that
    a failing test does not hang.

    Each reply starts with a complete decision: `RUNAWAY_DECISION` (one in the json, react and call_tool
    protocols) as text, or for a request that offers tools, a native call of the calculator. Acting on a cut
    reply would run it. Records the completion tokens of every reply (`completions`), and reports them.
    """

    model_id = "runaway"
    UNCAPPED_CHARS = 200_000
    TOOL_CALL_TOKENS = 10  # what the native call counts for, of the capped tokens

    def __init__(self) -> None:
        super().__init__()
        self.completions: list[int] = []

    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        caps = [body[key] for key in ("max_tokens", "max_completion_tokens") if isinstance(body.get(key), int)]
        cap = min(caps) if caps else None
        message: dict[str, Any] = {"role": "assistant"}
        if body.get("tools"):
            message["tool_calls"] = [_tool_call("calculator", {"expression": "23 * 19"})]
            start, spent = [], self.TOOL_CALL_TOKENS
        else:
            start, spent = RUNAWAY_DECISION.split(" "), 0
        words = _runaway_words(start, None if cap is None else max(0, cap - spent), self.UNCAPPED_CHARS)
        message["content"] = " ".join(words)
        tokens = spent + len(words)
        self.completions.append(tokens)
        prompt = len(json.dumps(body.get("messages", []))) // 4
        return 200, _completion(body, message, "length", {"prompt_tokens": prompt, "completion_tokens": tokens})


# A decision that every text protocol reads as a call of calculator(expression="23 * 19"), when not cut.
RUNAWAY_DECISION = (
    '{"thought": "I multiply.", "action": "calculator", "action_input": {"expression": "23 * 19"}}\n'
    "Thought: I multiply.\nAction: calculator[23 * 19]\n"
    'CALL_TOOL(calculator, {"expression": "23 * 19"})\nand'
)


def _runaway_words(start: list[str], tokens: int | None, most_chars: int) -> list[str]:
    """`start`, then more words without end: `tokens` words, or without a cap about `most_chars` characters."""
    words: list[str] = []
    length = 0
    while len(words) < tokens if tokens is not None else length < most_chars:
        words.append(start[len(words)] if len(words) < len(start) else "on")
        length += len(words[-1]) + 1
    return words


def _tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    call = {"name": name, "arguments": json.dumps(args)}
    return {"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function", "function": call}


def _completion(body: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
    }


def _as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion as one streamed chunk: the message as the delta, tool calls indexed."""
    (choice,) = completion["choices"]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(delta["tool_calls"])]
    return {**completion, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}  # fmt: skip
