"""Transient tool failures are retried in place: an exception (not a ToolException) or a timeout runs the call
again after a tenacity backoff, up to `tool_attempts`, without a model call; tools not declared safe to repeat
(their timeouts and lost connections reported in doubt), empty results and rejected calls run once; the model sees
only the last failure; `max_tool_attempts` bounds a whole run."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from reinloop import AgentConfig, ConfigurationError, build_agent, idempotency_key
from reinloop.nodes import execute_tool
from reinloop.nodes.execute_tool import IN_DOUBT_TEMPLATE
from reinloop.state import CallCheck
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import ToolRegistry
from reinloop.tools import retry as retry_module
from tests.conftest import make_context, new_thread

# No test here sleeps for a backoff: the waits are recorded instead.
NO_WAIT = {"tool_backoff_s": 0.0}


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The backoff waits tenacity asked for, in order; nothing sleeps."""
    recorded: list[float] = []
    monkeypatch.setattr(retry_module, "pause", recorded.append)
    return recorded


class Flaky:
    """A tool that raises its first `failures` calls (each naming its number), then answers; it records the
    idempotency key of every call. A fetch, declared safe to repeat (idempotent), so it may be retried."""

    def __init__(self, failures: int, *, name: str = "fetch") -> None:
        self.calls = 0
        self.keys: list[str | None] = []

        def fetch(query: str) -> str:
            """Fetch a page from a service that sometimes fails."""
            self.calls += 1
            self.keys.append(idempotency_key())
            if self.calls <= failures:
                raise ConnectionError(f"service unavailable (call {self.calls})")
            return f"page for {query}"

        self.tool = tool(name)(fetch)
        self.tool.metadata = {"reinloop": {"idempotent": True}}


def agent_with(
    tools: Any, replies: list[Any], checkpointer: Any = None, guards: Any = (), **config: Any
) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(replies=replies)
    settings = AgentConfig(**{**NO_WAIT, **config})
    return build_agent(model, tools, config=settings, checkpointer=checkpointer, guards=guards), model


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [message for message in result["messages"] if isinstance(message, ToolMessage)]


# End to end ----------------------------------------------------------------------------------------------


def test_a_flaky_tool_is_retried_in_place_without_a_model_call():
    flaky = Flaky(failures=2)
    # max_repeats=1: were the retries repeats, the dead-loop guard would refuse them.
    agent, model = agent_with([flaky.tool], [tool_call("fetch", {"query": "q"}), "done"], max_repeats=1)
    result = agent.invoke({"task": "fetch q"})
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "done")
    assert flaky.calls == 3
    assert len(model.calls) == 2  # the call and the answer: the scripted model fails on a third
    (message,) = tool_messages(result)
    assert (message.status, message.content) == ("success", "page for q")
    assert (result["consecutive_errors"], result["tool_attempts"]) == (0, 3)


def test_a_tool_that_always_fails_runs_exactly_tool_attempts_times_and_the_model_sees_the_last_error():
    flaky = Flaky(failures=100)
    replies = [tool_call("fetch", {"query": "q"}), "gave up"]
    # error_threshold=2: were the retries errors of their own, the error streak would end the run.
    agent, model = agent_with([flaky.tool], replies, tool_attempts=4, error_threshold=2)
    result = agent.invoke({"task": "fetch q"})
    assert result["finish_reason"] == "answered"
    assert flaky.calls == 4
    seen = [message for message in model.calls[1].messages if isinstance(message, ToolMessage)]
    assert [message.content for message in seen] == [
        "Error: 'fetch' failed (4 attempts): ConnectionError: service unavailable (call 4). "
        "Change the arguments or the tool."
    ]
    assert (result["consecutive_errors"], result["tool_attempts"]) == (1, 4)


def test_one_attempt_means_no_retry_and_no_note():
    flaky = Flaky(failures=1)
    agent, _ = agent_with([flaky.tool], [tool_call("fetch", {"query": "q"}), "done"], tool_attempts=1)
    (message,) = tool_messages(agent.invoke({"task": "t"}))
    assert flaky.calls == 1
    assert message.content.startswith("Error: 'fetch' failed: ConnectionError: service unavailable (call 1).")


@pytest.mark.parametrize(
    "register",
    [
        lambda reg, t: reg.add(t, retryable=False),
        lambda reg, t: reg.add(t, idempotent=False),
        lambda reg, t: reg.add(t.model_copy(update={"metadata": {"reinloop": {"retryable": False}}})),
        lambda reg, t: reg.add(t.model_copy(update={"metadata": None})),
    ],
    ids=["retryable-false", "not-idempotent", "declared-in-metadata", "undeclared"],
)
def test_a_tool_that_is_not_retryable_is_tried_once(register):
    flaky = Flaky(failures=1)
    registry = ToolRegistry()
    register(registry, flaky.tool)
    agent, _ = agent_with(registry, [tool_call("fetch", {"query": "q"}), "done"])
    (message,) = tool_messages(agent.invoke({"task": "t"}))
    assert flaky.calls == 1
    assert message.status == "error"


def test_a_non_idempotent_tool_that_says_it_is_retryable_is_retried_with_the_same_key():
    flaky = Flaky(failures=2)
    registry = ToolRegistry()
    registry.add(flaky.tool, idempotent=False, retryable=True)
    agent, _ = agent_with(registry, [tool_call("fetch", {"query": "q"}, id="c1"), "done"], InMemorySaver())
    agent.invoke({"task": "t"}, new_thread())
    assert flaky.calls == 3
    assert len(set(flaky.keys)) == 1 and flaky.keys[0] is not None and flaky.keys[0].endswith("/1/c1")


def test_empty_results_and_invalid_calls_are_not_retried():
    calls: list[str] = []

    @tool
    def find(query: str, limit: int) -> str:
        """Find things."""
        calls.append(query)
        return ""

    replies = [tool_call("find", {"query": "q", "limit": 1}), tool_call("find", {"query": "x", "limit": "many"}), "ok"]
    agent, model = agent_with([find], replies)
    result = agent.invoke({"task": "t"})
    assert calls == ["q"]
    sent = [m for call in model.calls for m in call.messages if isinstance(m, ToolMessage)]
    assert [message.status for message in sent] == ["error", "error"]  # each failed once, sent once
    assert result["tool_attempts"] == 1


def test_a_timeout_is_retried_with_the_full_timeout_each_time(gate):
    runs: list[float] = []

    @tool
    def slow_once(query: str) -> str:
        """Answer, slowly the first time."""
        runs.append(time.monotonic())
        if len(runs) == 1:
            gate.released.wait(60)
        return f"answer to {query}"

    registry = ToolRegistry()
    registry.add(slow_once, retryable=True)
    agent, model = agent_with(registry, [tool_call("slow_once", {"query": "q"}), "done"], tool_timeout_s=0.3)
    result = agent.invoke({"task": "t"})
    (message,) = tool_messages(result)
    assert (message.status, message.content) == ("success", "answer to q")
    assert len(runs) == 2 and runs[1] - runs[0] >= 0.3
    assert len(model.calls) == 2


def test_a_tool_that_always_times_out_reports_its_attempts(gate):
    registry = ToolRegistry()
    registry.add(gate.tool, retryable=True)
    agent, _ = agent_with(registry, [tool_call("hang", {"seconds": 1}), "done"], tool_timeout_s=0.1)
    (message,) = tool_messages(agent.invoke({"task": "t"}))
    assert message.content.startswith("Error: 'hang' gave no result within 0.1 s (3 attempts).")


def test_a_timeout_of_a_tool_not_declared_safe_to_repeat_is_run_once_and_reported_in_doubt(gate):
    agent, _ = agent_with([gate.tool], [tool_call("hang", {"seconds": 1}), "done"], tool_timeout_s=0.1)
    result = agent.invoke({"task": "t"})
    (message,) = tool_messages(result)
    assert message.content == IN_DOUBT_TEMPLATE.format(name="hang", failure="gave no result within 0.1 s")
    assert result["tool_attempts"] == 1


@tool
def drops(text: str) -> str:
    """Send a text to a service whose connection drops."""
    raise ConnectionResetError("connection reset by peer")


@tool
def refused(text: str) -> str:
    """Send a text to a service that is down."""
    raise ConnectionRefusedError("connection refused")


@tool
def broken(text: str) -> str:
    """Send a text with a bug before anything is sent."""
    raise ValueError("bad text")


@pytest.mark.parametrize(
    ("tool_obj", "in_doubt"),
    [(drops, True), (refused, False), (broken, False)],
    ids=["lost-connection-in-doubt", "refused-connection-never-reached", "other-exception-plain-error"],
)
def test_only_a_lost_connection_of_a_tool_not_declared_safe_to_repeat_is_reported_in_doubt(tool_obj, in_doubt):
    ctx = make_context(tools=[tool_obj], **NO_WAIT)
    check = CallCheck(
        call_id="c1",
        name=tool_obj.name,
        args={"text": "x"},
        signature="",
        key="k",
        attempts=1,
        error_kind=None,
        error=None,
    )
    (outcome,) = execute_tool(check, ctx, {})["tool_results"]
    # The guards see the kind they always saw: the doubt is in the words.
    assert (outcome["error_kind"], outcome["attempts"]) == ("tool_error", 1)
    assert ("may or may not have had its effect" in outcome["content"]) is in_doubt
    if in_doubt:
        assert outcome["content"].startswith(
            "Error: 'drops' failed without an answer: ConnectionResetError: connection reset by peer, so this call"
        )


# Process isolation: the tool counts its runs in a file, since each run may be in another worker -------------


class CountedInput(BaseModel):
    counter: str
    fail: int  # the runs that fail
    hang: bool = False  # whether a failing run hangs (past its deadline) rather than raises


class Counted(BaseTool):
    name: str = "counted"
    description: str = "Fail, or hang, the first `fail` times."
    args_schema: type[BaseModel] = CountedInput

    def _run(self, counter: str, fail: int, hang: bool = False) -> str:
        path = Path(counter)
        path.write_text(path.read_text() + "x" if path.exists() else "x")
        runs = len(path.read_text())
        if runs <= fail and hang:
            sum(range(10**10))  # holds the GIL: only the worker's kill ends it
        if runs <= fail:
            raise ConnectionError(f"failed run {runs}")
        return f"ok after {runs} runs"


@pytest.mark.parametrize("hang", [False, True], ids=["raises", "hangs"])
def test_a_process_isolated_tool_is_retried_in_a_worker_killed_at_each_deadline(tmp_path, hang):
    registry = ToolRegistry()
    registry.add(Counted(), isolation="process", timeout_s=1.0, retryable=True)
    ctx = make_context(tools=registry, **NO_WAIT)
    args = {"counter": str(tmp_path / "runs"), "fail": 2, "hang": hang}
    check = CallCheck(
        call_id="c1", name="counted", args=args, signature="", key="t/1/c1", attempts=3, error_kind=None, error=None
    )
    started = time.monotonic()
    (outcome,) = execute_tool(check, ctx, {})["tool_results"]
    assert (outcome["content"], outcome["error_kind"], outcome["attempts"]) == ("ok after 3 runs", None, 3)
    if hang:  # two kills at the 1 s deadline, each well before the 10**10 loop could finish
        assert time.monotonic() - started < 30


# Backoff ----------------------------------------------------------------------------------------------------


def test_the_backoff_grows_exponentially_with_jitter_and_is_capped(waits):
    flaky = Flaky(failures=100)
    replies = [tool_call("fetch", {"query": "q"}), "done"]
    agent, _ = agent_with([flaky.tool], replies, tool_attempts=5, tool_backoff_s=0.5, tool_backoff_max_s=3.0)
    agent.invoke({"task": "t"})
    assert flaky.calls == 5 and len(waits) == 4
    for wait, low in zip(waits, [0.5, 1.0, 2.0, 3.0], strict=True):
        assert low <= wait <= min(low + 0.5, 3.0)
    assert all(wait > low for wait, low in zip(waits, [0.5, 1.0, 2.0], strict=False))  # the jitter


def test_no_wait_before_the_first_attempt_nor_after_a_success(waits):
    flaky = Flaky(failures=1)
    agent, _ = agent_with([flaky.tool], [tool_call("fetch", {"query": "q"}), "done"], tool_backoff_s=0.2)
    agent.invoke({"task": "t"})
    assert len(waits) == 1 and 0.2 <= waits[0] <= 0.4


# Nodes ------------------------------------------------------------------------------------------------------


def test_execute_tool_records_its_attempts():
    ctx = make_context(tools=[Flaky(failures=1).tool], **NO_WAIT)
    check = CallCheck(
        call_id="c1", name="fetch", args={"query": "q"}, signature="", key="k", attempts=2, error_kind=None, error=None
    )
    (outcome,) = execute_tool(check, ctx, {})["tool_results"]
    assert (outcome["content"], outcome["attempts"]) == ("page for q", 2)


# Configuration ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "kwargs", "expected"),
    [
        (None, {}, (True, False)),
        ({"reinloop": {"idempotent": True}}, {}, (True, True)),
        ({"reinloop": {"retryable": True}}, {}, (True, True)),
        ({"reinloop": {"idempotent": False}}, {}, (False, False)),
        (None, {"idempotent": True}, (True, True)),
        (None, {"retryable": True}, (True, True)),
        (None, {"idempotent": False, "retryable": True}, (False, True)),
        ({"reinloop": {"idempotent": True}}, {"idempotent": False}, (False, False)),
        ({"reinloop": {"retryable": True}}, {"retryable": False}, (True, False)),
        ({"reinloop": {"retryable": False}}, {"retryable": True}, (True, True)),
        ({"readOnlyHint": True}, {}, (True, True)),
        ({"idempotentHint": True, "readOnlyHint": False}, {}, (True, True)),
        ({"readOnlyHint": False, "idempotentHint": False, "destructiveHint": True}, {}, (True, False)),
        ({"readOnlyHint": True, "reinloop": {"idempotent": False}}, {}, (False, False)),
        ({"readOnlyHint": True}, {"retryable": False}, (True, False)),
    ],
    ids=[
        "undeclared-runs-once",
        "metadata-idempotent",
        "metadata-retryable",
        "metadata-not-idempotent",
        "add-idempotent",
        "add-retryable",
        "add-not-idempotent-but-retryable",
        "add-overrides-metadata-idempotent",
        "add-overrides-metadata-retryable",
        "add-overrides-metadata-not-retryable",
        "mcp-read-only",
        "mcp-idempotent",
        "mcp-neither",
        "reinloop-metadata-over-mcp-hint",
        "add-over-mcp-hint",
    ],
)
def test_a_tool_is_retryable_only_when_declared_safe_to_repeat(metadata, kwargs, expected):
    @tool
    def send(text: str) -> str:
        """Send a text."""
        return text

    send.metadata = metadata
    registry = ToolRegistry()
    registry.add(send, **kwargs)
    assert (registry["send"].idempotent, registry["send"].retryable) == expected


def test_policy_and_config_mistakes_are_configuration_errors():
    with pytest.raises(ConfigurationError, match=re.escape("retryable for tool 'fetch' must be True or False")):
        ToolRegistry().add(Flaky(0).tool, retryable="sometimes")
    for field, value in [("tool_attempts", 0), ("tool_backoff_s", -1), ("max_tool_attempts", 0)]:
        with pytest.raises(ConfigurationError, match=field):
            AgentConfig(**{field: value})
