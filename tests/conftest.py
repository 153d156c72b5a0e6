"""Shared tools and helpers for the tests."""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qs, urlparse

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, sqlite_checkpointer
from reinloop.context import AgentContext
from reinloop.guards import disable
from reinloop.protocols import get_protocol
from reinloop.state import CallRecord
from reinloop.testing import ScriptedChatModel
from reinloop.tools import ToolRegistry
from tests.openai_server import JsonHandler

THREAD = {"configurable": {"thread_id": "test-thread"}}
# scripts/test.sh starts a local PostgreSQL with this database.
POSTGRES_URL = os.environ.get(
    "REINLOOP_TEST_POSTGRES_URL", "postgresql://postgres:postgres@127.0.0.1:5432/reinloop_test"
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def lookup(key: str) -> str:
    """Look a key up in a small table."""
    table = {"capital_of_france": "Paris", "empty": ""}
    if key not in table:
        raise ToolException(f"unknown key {key!r}; known keys: {sorted(table)}")
    return table[key]


@tool
def explode(reason: str) -> str:
    """Always fails with a ZeroDivisionError."""
    return str(1 / 0)


# It has no effect: declared safe to repeat, so that its failures are retried in place.
explode.metadata = {"reinloop": {"retryable": True}}


class Gate:
    """A tool that blocks until released: a hung tool that the test frees at teardown."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.entered = threading.Event()

        @tool
        def hang(seconds: int) -> str:
            """Wait for something that never comes."""
            self.entered.set()
            self.released.wait(60)
            return "finally"

        self.tool = hang


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.released.set()


# For tests of another guard on a tool that keeps failing: without the tool's circuit, which would open.
NO_CIRCUIT = (disable("tool_circuit"),)


def make_agent(replies, tools=(add, lookup, explode), checkpointer=None, summary_model=None, guards=(), **config):
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(
        model,
        list(tools),
        config=AgentConfig(**config),
        checkpointer=checkpointer or InMemorySaver(),
        summary_model=summary_model,
        guards=guards,
    )
    return agent, model


def make_context(tools=(add, lookup, explode), model=None, summarizer=None, **config) -> AgentContext:
    cfg = AgentConfig(**config)
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return AgentContext.create(cfg, registry, get_protocol(cfg.protocol), model or ScriptedChatModel(), summarizer)


@pytest.fixture(params=["memory", "sqlite"])
def saver(request, tmp_path):
    """A checkpointer in memory, then one on a SQLite file."""
    if request.param == "memory":
        yield InMemorySaver()
        return
    saver = sqlite_checkpointer(tmp_path / "db.sqlite")
    yield saver
    saver.conn.close()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL database: skipped where none runs, but required in CI."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL at {POSTGRES_URL} (scripts/start-postgres.sh): {exc}")
        pytest.skip(f"no PostgreSQL at {POSTGRES_URL}; run scripts/start-postgres.sh")
    return POSTGRES_URL


def new_thread() -> dict:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}"}}


class _WeatherHandler(JsonHandler):
    """A weather service on 127.0.0.1: Paris is fine, 'Slowtown' answers late, 'Crashville' fails."""

    release = threading.Event()

    def do_GET(self) -> None:
        url = urlparse(self.path)
        city = parse_qs(url.query).get("city", [""])[0]
        if url.path != "/weather" or city == "Atlantis":
            self.send_json(404, {"error": "unknown city"})
        elif city == "Slowtown":
            self.release.wait(10)  # far beyond the client's timeout; released at teardown
            self.send_json(200, {"city": city, "temperature_c": 1.0, "condition": "late"})
        elif city == "Crashville":
            self.send_json(500, {"error": "internal"})
        else:
            self.send_json(200, {"city": city, "temperature_c": 18.5, "condition": "cloudy"})


@pytest.fixture(scope="session")
def weather_server() -> Iterator[str]:
    """The base URL of a real HTTP weather service on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WeatherHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _WeatherHandler.release.set()
    server.shutdown()
    server.server_close()


# Nodes called with a hand-built state (tests/nodes, and the guards' tests of validate_args and check_finish) ----


def call(name, args, call_id="c1"):
    """A tool call as a model's reply carries it."""
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def frozen_call(node, state, *args):
    """Call `node` and fail if it mutated its input state."""
    before = copy.deepcopy(state)
    update = node(state, *args)
    assert state == before, f"{node.__name__} mutated its input state"
    return update


SIG = 'add{"a": 1, "b": 2}'


def rec(outcome, result=None, signature=SIG, name=None):
    """A call window's record of one call of `add(a=1, b=2)`, or of `signature`."""
    record = CallRecord(signature=signature, outcome=outcome, result=result)
    return record if name is None else {**record, "name": name}


# End to end runs (tests/test_loop.py and the guards' tests) ----------------------------------------------------


def tool_messages(result):
    """The tool messages of a run's result, in order."""
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def counting_tool():
    """A `fetch` tool that records each page it was called with, and that list."""
    runs = []

    @tool
    def fetch(page: int) -> str:
        """Fetch one page of results."""
        runs.append(page)
        return f"page {page}: nothing new"

    return fetch, runs


def benchmark_script(file: str, name: str) -> ModuleType:
    """benchmarks/`file`, loaded as the module `name` (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "benchmarks" / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
