"""The guards' table: one guard per finish reason but answered, in priority order, read by check_finish,
circuit_break and the CLI."""

import itertools

import pytest
from langchain_core.messages import ToolMessage

from reinloop import AgentConfig, build_agent
from reinloop.cli import EXIT_CODES
from reinloop.guards import DEFAULT_GUARDS
from reinloop.memory import pairing_violations
from reinloop.nodes import check_finish, circuit_break
from reinloop.state import FINISH_REASONS, CallCheck, act, answer
from reinloop.testing import ScriptedChatModel, tool_call
from tests.conftest import THREAD, add, explode, make_context

REASONS = ["answered", *(guard.name for guard in DEFAULT_GUARDS if guard.stops)]


def test_the_table_has_one_entry_per_finish_reason_in_the_documented_priority():
    assert sorted(REASONS) == sorted(FINISH_REASONS)
    assert REASONS == [
        "answered",
        "middleware",
        "dead_loop",
        "error_streak",
        "token_budget",
        "max_tool_attempts",
        "max_iterations",
        "step_limit",
    ]


def test_the_cli_exit_codes_come_from_the_table():
    assert EXIT_CODES == {
        "answered": 0,
        "max_iterations": 3,
        "error_streak": 4,
        "dead_loop": 5,
        "token_budget": 6,
        "max_tool_attempts": 7,
        "middleware": 9,
        "step_limit": 8,
    }
    assert all(EXIT_CODES[guard.name] == guard.exit_code for guard in DEFAULT_GUARDS if guard.stops)


def test_check_finish_picks_the_first_entry_that_trips():
    repeated = CallCheck(
        call_id="c1", name="add", args={}, signature="add", key="k", error_kind="repeat_after_feedback", error="x"
    )
    everything = {
        "decision": act([]),
        "checks": [repeated],
        "consecutive_errors": 3,
        "reflected_at": 2,  # the streak's reflection turn was taken, and the errors continued
        "usage": {"model_calls": 1, "prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100},
        "tool_attempts": 10,
        "iteration": 4,
        "iterations_left": 1,
        # a round takes up to 8 steps with max_parse_retries=1, the break 1, and the last step needs 1 left
        "remaining_steps": 4,
    }
    ctx = make_context(
        error_threshold=3, run_token_budget=100, max_tool_attempts=10, max_parse_retries=1, max_replans=0
    )
    under_budget = {**everything["usage"], "total_tokens": 99}
    quiet = {"checks": [], "consecutive_errors": 0, "usage": under_budget, "tool_attempts": 9, "iterations_left": 2}
    cases = [
        ({"decision": answer("42")}, "answered"),
        ({}, "dead_loop"),
        ({"checks": []}, "error_streak"),
        ({"checks": [], "consecutive_errors": 0}, "token_budget"),
        ({"checks": [], "consecutive_errors": 0, "usage": under_budget}, "max_tool_attempts"),
        ({"checks": [], "consecutive_errors": 0, "usage": under_budget, "tool_attempts": 9}, "max_iterations"),
        ({**quiet, "remaining_steps": 9}, "step_limit"),
        ({**quiet, "remaining_steps": 10}, None),
        ({**quiet, "remaining_steps": None}, None),  # not run by LangGraph: no step limit to keep
    ]
    for changes, reason in cases:
        assert check_finish({**everything, **changes}, ctx)["finish_reason"] == reason


# A state every guard stops (circuit_break asks the guard for its verdict again).
STATE = {
    "iteration": 4,
    "iterations_left": 0,
    "remaining_steps": 3,
    "tool_attempts": 12,
    "consecutive_errors": 3,
    "reflected_at": 2,
    "streak_errors": ['add({"a": 2}): Error: boom'],
    "usage": {"model_calls": 4, "prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000},
    "messages": [ToolMessage("Error: boom", tool_call_id="c1", status="error")],
    "checks": [
        CallCheck(
            call_id="c1",
            name="add",
            args={"a": 1},
            signature='add{"a": 1}',
            key="k",
            error_kind="repeat_after_feedback",
            error="x",
        )
    ],
}


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("max_iterations", "Stopped: no final answer after 4 rounds; the iteration budget is used up."),
        ("error_streak", 'Stopped: 3 errors in a row (the limit is 3). The last one: add({"a": 2}): Error: boom'),
        (
            "dead_loop",
            "Stopped: a dead loop. The same call kept coming after being refused more than 5 times, or answered "
            'from cache more than 5 times, within 8 decisions: add({"a": 1})',
        ),
        ("token_budget", "Stopped: the run used 1000 tokens after 4 rounds (the budget is 500)."),
        (
            "max_tool_attempts",
            "Stopped: the run made 12 tool calls, retries included, in 4 rounds (the limit is 12).",
        ),
        (
            "step_limit",
            "Stopped: no final answer after 4 rounds; the recursion_limit this run was invoked with leaves too few "
            "LangGraph steps for another round (one takes up to 8). batch, pipes and astream_events pass LangChain's "
            "default of 25: give a higher recursion_limit in the config, or none.",
        ),
    ],
    ids=["max-iterations", "error-streak", "dead-loop", "token-budget", "max-tool-attempts", "step-limit"],
)
def test_circuit_break_writes_the_entry_s_template(reason, text):
    ctx = make_context(run_token_budget=500, max_tool_attempts=12, max_parse_retries=1)
    (message,) = circuit_break({**STATE, "finish_reason": reason}, ctx)["messages"]
    assert message.content.startswith(text + " The state is saved")


def test_circuit_break_refuses_an_answered_run():
    with pytest.raises(RuntimeError, match="answered"):
        circuit_break({**STATE, "finish_reason": "answered"}, make_context())


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("max_iterations", "Stopped: no final answer after 1 round; the iteration budget is used up."),
        ("error_streak", 'Stopped: 1 error in a row (the limit is 1). The last one: add({"a": 2}): Error: boom'),
        (
            "dead_loop",
            "Stopped: a dead loop. The same call kept coming after being refused more than 1 time, or answered "
            'from cache more than 1 time, within 4 decisions: add({"a": 1})',
        ),
        ("token_budget", "Stopped: the run used 1000 tokens after 1 round (the budget is 500)."),
        ("max_tool_attempts", "Stopped: the run made 1 tool call, retries included, in 1 round (the limit is 1)."),
        ("step_limit", "Stopped: no final answer after 1 round; the recursion_limit this run was invoked with"),
    ],
    ids=["max-iterations", "error-streak", "dead-loop", "token-budget", "max-tool-attempts", "step-limit"],
)
def test_circuit_break_counts_one_in_the_singular(reason, text):
    ctx = make_context(run_token_budget=500, max_tool_attempts=1, error_threshold=1, repeats_after_feedback=1,
                       repeats_after_cache=1)  # fmt: skip
    state = {**STATE, "iteration": 1, "tool_attempts": 1, "consecutive_errors": 1, "reflected_at": 0}
    state["finish_reason"] = reason
    (message,) = circuit_break(state, ctx)["messages"]
    assert message.content.startswith(text)


def test_circuit_break_keeps_its_explanation_apart_from_the_python_resume_advice():
    from reinloop.nodes.circuit_break import EXPLANATION_KEY, RESUME_ADVICE

    (message,) = circuit_break({**STATE, "finish_reason": "max_iterations"}, make_context())["messages"]
    explanation = "Stopped: no final answer after 4 rounds; the iteration budget is used up."
    assert message.response_metadata[EXPLANATION_KEY] == explanation  # what the reinloop command shows
    assert message.content == explanation + RESUME_ADVICE  # what a library user reads


LOOPING_MODELS = {
    "same-success": lambda n: tool_call("add", {"a": 1, "b": 1}),
    "same-failure": lambda n: tool_call("explode", {"reason": "x"}),
    "failures-and-cache": lambda n: (
        tool_call("explode", {"reason": str(n)}) if n % 2 else tool_call("add", {"a": 1, "b": 1})
    ),
}


@pytest.mark.parametrize("looping", list(LOOPING_MODELS), ids=list(LOOPING_MODELS))
@pytest.mark.parametrize(
    ("budget", "reason"), [({"max_iterations": 12}, "max_iterations"), ({"run_token_budget": 3_000}, "token_budget")]
)
def test_every_escalation_stays_within_the_iteration_and_token_budgets(looping, budget, reason):
    # Guards that never break here (huge limits) still cannot keep a run going past its budgets.
    rounds = itertools.count()
    model = ScriptedChatModel(respond=lambda messages: LOOPING_MODELS[looping](next(rounds)), max_calls=40)
    never = {"repeats_after_feedback": 1_000, "repeats_after_cache": 1_000, "error_threshold": 1_000}
    never["max_stalled"] = 1_000
    limits = {**never, "max_iterations": 30, **budget}
    summarizer = ScriptedChatModel(respond=lambda messages: "earlier steps")
    agent = build_agent(model, [add, explode], config=AgentConfig(**limits), summary_model=summarizer)
    result = agent.invoke({"task": "t"}, THREAD)
    assert result["finish_reason"] == reason and result["iteration"] <= limits["max_iterations"]
    assert len(model.calls) == result["iteration"]
    assert pairing_violations(result["messages"][:-1]) == []
