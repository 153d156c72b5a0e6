"""Shared tools and helpers for the tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent
from reinloop.context import AgentContext
from reinloop.protocols import get_protocol
from reinloop.testing import ScriptedChatModel
from reinloop.tools import ToolRegistry

THREAD = {"configurable": {"thread_id": "test-thread"}}


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


def make_agent(replies, tools=(add, lookup, explode), checkpointer=None, **config):
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(model, list(tools), config=AgentConfig(**config), checkpointer=checkpointer or InMemorySaver())
    return agent, model


def make_context(tools=(add, lookup, explode), model=None, **config) -> AgentContext:
    cfg = AgentConfig(**config)
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return AgentContext.create(cfg, registry, get_protocol(cfg.protocol), model or ScriptedChatModel())
