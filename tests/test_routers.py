import ast
import asyncio
import inspect
import textwrap
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import END
from langgraph.types import Send

from reinloop.graph import (
    CHECK_FINISH,
    CIRCUIT_BREAK,
    COMPRESS_MEMORY,
    DECIDE,
    EXECUTE_TOOL,
    OBSERVE,
    ROUTER_READS,
    VALIDATE_ARGS,
    route_after_check_finish,
    route_after_validate_args,
)
from reinloop.state import CallCheck, act, answer, unparsable
from reinloop.testing import tool_call
from tests.conftest import make_agent, new_thread

TASK = {"task": "add twice"}


def check(call_id, error_kind=None, cached=None):
    return CallCheck(
        call_id=call_id, name="add", args={}, signature="s", error_kind=error_kind, error=None, cached=cached
    )


@pytest.mark.parametrize(
    ("state", "route"),
    [
        ({"decision": unparsable("x", "bad"), "correction": "try again", "checks": []}, DECIDE),
        ({"decision": unparsable("x", "bad"), "correction": None, "checks": []}, OBSERVE),
        ({"decision": answer("42"), "correction": None, "checks": []}, CHECK_FINISH),
        ({"decision": act([]), "correction": None, "checks": [check("c1", "unknown_tool")]}, OBSERVE),
        ({"decision": act([]), "correction": None, "checks": [check("c1", "repeated_call")]}, OBSERVE),
        ({"decision": act([]), "correction": None, "checks": [check("c1", "repeat_after_feedback")]}, OBSERVE),
        ({"decision": act([]), "correction": None, "checks": [check("c1", cached="4")]}, OBSERVE),
    ],
    ids=[
        "parse-retry-left",
        "parse-retries-exhausted",
        "final-answer",
        "only-rejected-calls",
        "refused-repeat",
        "dead-loop-repeat",
        "answered-from-cache",
    ],
)
def test_route_after_validate_args(state, route):
    assert route_after_validate_args(state) == route


def test_route_after_validate_args_sends_each_valid_call_to_its_own_task():
    checks = [check("c1"), check("c2", "invalid_args"), check("c3"), check("c4", cached="4")]
    route = route_after_validate_args({"decision": act([]), "correction": None, "checks": checks})
    assert route == [Send(EXECUTE_TOOL, checks[0]), Send(EXECUTE_TOOL, checks[2])]


@pytest.mark.parametrize(
    ("reason", "route"),
    [
        ("answered", END),
        ("max_iterations", CIRCUIT_BREAK),
        ("error_streak", CIRCUIT_BREAK),
        ("dead_loop", CIRCUIT_BREAK),
        ("token_budget", CIRCUIT_BREAK),
        (None, DECIDE),
    ],
    ids=["answered", "max-iterations", "error-streak", "dead-loop", "token-budget", "continue"],
)
def test_route_after_check_finish(reason, route):
    assert route_after_check_finish({"finish_reason": reason}) == route


# nodes and routers traced exactly when something would see them ------------------------------------------

ROUTERS = ["route_after_validate_args", "route_after_check_finish"]
ROUND = [DECIDE, VALIDATE_ARGS, EXECUTE_TOOL, OBSERVE, COMPRESS_MEMORY, CHECK_FINISH]


class _Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.started: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, name: str | None = None, **kwargs: Any) -> None:
        self.started.append(name or "")


def _agent():
    return make_agent([tool_call("add", {"a": 1, "b": 2}), tool_call("add", {"a": 2, "b": 2}), "done"])[0]


def _routed(started: list[str]) -> list[str]:
    return [name for name in started if name in ROUTERS]


def _nodes(started: list[str]) -> list[str]:
    return [name for name in started if name in ROUND]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_handler_sees_every_node_and_router_run_as_langgraph_traces_it(asynchronous: bool) -> None:
    handler = _Runs()
    config = {**new_thread(), "callbacks": [handler]}
    result = asyncio.run(_agent().ainvoke(TASK, config)) if asynchronous else _agent().invoke(TASK, config)
    assert result["final_answer"] == "done"
    # Two rounds and the answer: validate_args routes three times, check_finish three times.
    assert _routed(handler.started) == [ROUTERS[0], ROUTERS[1]] * 3
    assert _nodes(handler.started) == ROUND * 2 + [DECIDE, VALIDATE_ARGS, CHECK_FINISH]


@pytest.mark.parametrize("route", [route_after_validate_args, route_after_check_finish], ids=lambda r: r.__name__)
def test_each_router_reads_only_the_keys_langgraph_gives_it(route: Any) -> None:
    # LangGraph gives a router only the keys of its input schema (ROUTER_READS): a key read beyond them would
    # always be missing. Every use of `state` must be `state[key]` or `state.get(key)` with a declared key.
    tree = ast.parse(textwrap.dedent(inspect.getsource(route)))
    read, uses = set(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "state":
            read.add(ast.literal_eval(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "state"):  # fmt: skip
            read.add(ast.literal_eval(node.args[0]))
        else:
            continue
        uses += 1
    names = sum(isinstance(node, ast.Name) and node.id == "state" for node in ast.walk(tree))
    assert uses == names and read == set(ROUTER_READS[route.__name__])
