import pytest
from langgraph.graph import END
from langgraph.types import Send

from reinloop.graph import (
    CHECK_FINISH,
    CIRCUIT_BREAK,
    DECIDE,
    EXECUTE_TOOL,
    OBSERVE,
    route_after_check_finish,
    route_after_validate_args,
)
from reinloop.state import CallCheck, act, answer, unparsable


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
