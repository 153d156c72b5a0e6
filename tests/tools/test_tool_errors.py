"""One rule for "this result is an error", whatever the tool's origin, and which failures are retried.

A tool's failure counts for the error streak however LangChain would have reported it: raised, a
`ToolException` that `handle_tool_error` would have turned into content, a ToolMessage with status "error" (as
MCP tools report theirs), or text that the tool's own `is_error` calls an error. A ToolException is the
model's to fix and is not retried in place; an exception from a failing backend is (or as `retry_on` says).
Content blocks read as text, without their ids, so identical results keep identical keys.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool

from reinloop import AgentConfig, build_agent
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import ToolRegistry
from reinloop.tools import retry as retry_module
from reinloop.tools.results import content_text
from tests.conftest import NO_CIRCUIT

NO_WAIT = {"tool_backoff_s": 0.0}


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(retry_module, "pause", lambda seconds: None)


class Counting:
    """A tool body that records its calls and fails or answers as told."""

    def __init__(self, outcome: Any) -> None:
        self.calls = 0
        self.outcome = outcome

    def __call__(self, key: str) -> Any:
        self.calls += 1
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome() if callable(self.outcome) else self.outcome


# A look-up declared safe to repeat, so that it may be retried in place.
RETRYABLE = {"reinloop": {"retryable": True}}


def lookup_tool(body: Counting, **fields: Any) -> StructuredTool:
    def lookup(key: str) -> Any:
        return body(key)

    return StructuredTool.from_function(func=lookup, name="lookup", description="Look a key up.", **fields)


def run(
    tools: Any, replies: list[Any], *, sync: bool = True, guards: Any = (), **config: Any
) -> tuple[dict[str, Any], Any]:
    model = ScriptedChatModel(replies=replies)
    settings = AgentConfig(**{**NO_WAIT, "max_replans": 0, **config})
    agent = build_agent(model, tools, config=settings, guards=guards)
    if sync:
        return agent.invoke({"task": "look it up"}), model
    return asyncio.run(agent.ainvoke({"task": "look it up"})), model


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [message for message in result["messages"] if isinstance(message, ToolMessage)]


def failing_calls(count: int) -> list[Any]:
    # Different arguments each time, so that no repeat guard steps in before the error streak.
    return [tool_call("lookup", {"key": f"k{n}"}) for n in range(count)] + ["gave up"]


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize(
    "handler",
    [True, "the lookup failed", lambda exc: f"handled: {exc}"],
    ids=["handle-true", "handle-text", "handle-callable"],
)
def test_a_handled_tool_exception_is_an_error_worded_by_its_handler_and_ends_the_streak(handler, sync):
    body = Counting(ToolException("no such key: k"))
    tool_ = lookup_tool(body, handle_tool_error=handler)
    result, _ = run([tool_], failing_calls(8), sync=sync, error_threshold=3, tool_attempts=3, guards=NO_CIRCUIT)
    assert result["finish_reason"] == "error_streak"
    last = tool_messages(result)[-1]
    worded = {True: "no such key: k", "the lookup failed": "the lookup failed"}.get(handler, "handled: no such key: k")
    assert (last.status, last.content) == (
        "error",
        f"Error: 'lookup' failed: {worded}. Change the arguments or the tool.",
    )
    # The model's to fix: each call ran once, not retried in place (which would make 3 runs of each).
    assert body.calls == result["consecutive_errors"] > 3
    # The user's tool is left as it was given.
    assert tool_.handle_tool_error is handler


def test_a_tool_message_with_status_error_is_an_error():
    def body(key: str) -> ToolMessage:
        return ToolMessage("unknown time zone 'Mars/Olympus'", tool_call_id="x", status="error")

    tool_ = StructuredTool.from_function(func=body, name="lookup", description="Look a key up.")
    result, _ = run([tool_], failing_calls(8), error_threshold=2)
    assert result["finish_reason"] == "error_streak"
    last = tool_messages(result)[-1]
    assert last.status == "error"
    assert "unknown time zone 'Mars/Olympus'" in last.content


def test_is_error_marks_a_tool_that_reports_failure_in_its_text():
    body = Counting("ERROR: backend refused the key")
    registry = ToolRegistry()
    registry.add(lookup_tool(body), is_error=lambda text: text.startswith("ERROR"))
    result, _ = run(registry, failing_calls(8), error_threshold=3, tool_attempts=3, guards=NO_CIRCUIT)
    assert result["finish_reason"] == "error_streak"
    assert body.calls == result["consecutive_errors"]  # not retried in place
    assert tool_messages(result)[-1].content.startswith("Error: 'lookup' failed: ERROR: backend refused the key")


def test_without_is_error_the_same_text_is_a_success():
    body = Counting("ERROR: backend refused the key")
    result, _ = run([lookup_tool(body)], [tool_call("lookup", {"key": "k"}), "done"])
    assert [message.status for message in tool_messages(result)] == ["success"]


def test_a_backend_exception_is_retried_in_place_and_a_tool_exception_is_not():
    backend = Counting(ConnectionError("connection reset"))
    result, _ = run(
        [lookup_tool(backend, metadata=RETRYABLE)], [tool_call("lookup", {"key": "k"}), "done"], tool_attempts=3
    )
    assert backend.calls == 3
    assert tool_messages(result)[0].content.startswith("Error: 'lookup' failed (3 attempts): ConnectionError")
    refused = Counting(ToolException("no such key"))
    run([lookup_tool(refused, metadata=RETRYABLE)], [tool_call("lookup", {"key": "k"}), "done"], tool_attempts=3)
    assert refused.calls == 1


@pytest.mark.parametrize(
    ("retry_on", "raised", "calls"),
    [
        ((ToolException,), ToolException("rate limited"), 3),
        ((TimeoutError,), ConnectionError("reset"), 1),
        (lambda exc: "rate" in str(exc), ToolException("rate limited"), 3),
        (lambda exc: "rate" in str(exc), ConnectionError("reset"), 1),
    ],
    ids=["types-match", "types-miss", "predicate-match", "predicate-miss"],
)
def test_retry_on_says_which_exceptions_are_retried(retry_on, raised, calls):
    body = Counting(raised)
    registry = ToolRegistry()
    registry.add(lookup_tool(body), retry_on=retry_on, retryable=True)
    run(registry, [tool_call("lookup", {"key": "k"}), "done"], tool_attempts=3)
    assert body.calls == calls


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "id": f"lc_{uuid.uuid4().hex}"}


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_content_blocks_read_as_text_and_identical_results_are_answered_from_cache(sync):
    body = Counting(lambda: [text_block("5")])
    replies = [tool_call("lookup", {"key": "k"}), tool_call("lookup", {"key": "k"}), "5"]
    result, model = run([lookup_tool(body)], replies, sync=sync)
    (first,) = [message for message in model.calls[1].messages if isinstance(message, ToolMessage)]
    assert first.content == "5"
    # A fresh block id on every call does not make the same result a new one: the second call is answered
    # with the first's observation.
    assert body.calls == 1
    assert tool_messages(result)[-1].content.endswith("you already have its result:\n5")
    assert "lc_" not in str([message.content for call in model.calls for message in call.messages])


def test_non_text_blocks_are_short_placeholders_and_records_stay_data():
    png = base64.b64encode(b"\x89PNG" + bytes(2044)).decode()
    blocks = [
        text_block("the chart:"),
        {"type": "image", "base64": png, "mime_type": "image/png", "id": "lc_1"},
        {"type": "file", "url": "https://example.org/report.pdf", "mime_type": "application/pdf"},
        {"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"},
    ]
    assert content_text(blocks) == (
        "the chart:\n[image: image/png, 2.0 kB]\n[file: application/pdf, at https://example.org/report.pdf]"
        "\n[audio: audio/wav, 3 B]"
    )
    records = [{"type": "fruit", "name": "apple"}]
    body = Counting(lambda: records)
    result, _ = run([lookup_tool(body)], [tool_call("lookup", {"key": "k"}), "done"])
    assert tool_messages(result)[0].content == '[{"type":"fruit","name":"apple"}]'


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_an_artifact_stays_on_the_tool_message_and_is_not_shown_to_the_model(sync):
    @tool(response_format="content_and_artifact")
    def chart(key: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Draw a chart."""
        return [text_block("drawn")], {"structured_content": {"points": [1, 2, 3]}}

    result, model = run([chart], [tool_call("chart", {"key": "k"}), "done"], sync=sync)
    (message,) = tool_messages(result)
    assert (message.content, message.artifact) == ("drawn", {"structured_content": {"points": [1, 2, 3]}})
    assert "points" not in str([m.content for m in model.calls[-1].messages])


def test_an_artifact_too_large_to_save_is_dropped_and_the_result_kept():
    @tool(response_format="content_and_artifact")
    def dump(key: str) -> tuple[str, Any]:
        """Dump the table."""
        return "dumped", {"rows": "x" * 100_000}

    result, _ = run([dump], [tool_call("dump", {"key": "k"}), "done"])
    (message,) = tool_messages(result)
    assert (message.content, message.artifact) == ("dumped", None)
