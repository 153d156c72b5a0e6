"""The dead-loop guard (`reinloop.guards.repeats`): an identical call after a success is answered from cache (refused
past max_repeats when its tool opted out of the cache), a repeat after a failure runs again unless the failure left its
effect in doubt, and a repeat after more feedback than allowed ends the run as a dead loop; keyed on the call or on the
tool. Node level (validate_args with a hand-built window) and end to end."""

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException, tool

from reinloop import resume
from reinloop.guards.repeats import IN_DOUBT_REPEAT_TEMPLATE
from reinloop.memory import pairing_violations
from reinloop.memory.window import CACHED_RESULT_TEMPLATE
from reinloop.nodes import validate_args
from reinloop.state import act
from reinloop.testing import json_action, tool_call
from reinloop.tools import ToolRegistry
from tests.conftest import (
    NO_CIRCUIT,
    SIG,
    THREAD,
    add,
    call,
    counting_tool,
    explode,
    frozen_call,
    lookup,
    make_agent,
    make_context,
    rec,
    tool_messages,
)


def judged(window, tools=(add, lookup, explode), calls=None, doubtful=(), **config):
    ctx = make_context(tools=tools, **config)
    state = {
        "decision": act(calls or [call("add", {"a": 1, "b": 2})]),
        "call_window": window,
        "doubtful_calls": list(doubtful),
    }
    return frozen_call(validate_args, state, ctx, THREAD)["checks"]


def uncached_add() -> ToolRegistry:
    registry = ToolRegistry()
    registry.add(add, cacheable=False)
    return registry


def test_validate_args_refuses_the_repeat_of_a_success_that_exceeds_max_repeats_within_the_window():
    ok, tools = rec("ok", "3"), uncached_add()
    (checked,) = judged([[ok], [ok]], tools=tools, loop_window=3, max_repeats=2)
    assert checked["error_kind"] == "repeated_call" and checked.get("cached") is None
    assert "this call came 3 times in 3 decisions" in checked["error"]
    # below max_repeats it runs again; outside the window the old calls no longer count
    assert judged([[ok]], tools=tools, loop_window=3, max_repeats=2)[0]["error_kind"] is None
    other = rec("ok", "x", signature='lookup{"key": "x"}')
    (checked,) = judged([[ok], [ok], [other], [other]], tools=tools, loop_window=3, max_repeats=2)
    assert checked["error_kind"] is None


def test_validate_args_lets_a_failed_call_run_again_however_often_unless_keyed_on_the_tool():
    # the model's retry of a fault that may pass: a fault that lasts is the error streak's to stop
    failed = [[rec("failed", name="add")]] * 3
    assert judged(failed, loop_window=4, max_repeats=2)[0]["error_kind"] is None
    assert judged(failed, loop_window=4, max_repeats=2, loop_key="tool")[0]["error_kind"] == "repeated_call"


def test_validate_args_neither_judges_nor_counts_a_call_that_failed_validation():
    invalid = [[rec("invalid", signature='add{"a": "x"}')]] * 3
    bad = call("add", {"a": "x"})
    (checked,) = judged(invalid, calls=[bad], loop_window=4, max_repeats=1)
    assert checked["error_kind"] == "invalid_args"  # its validation error, which says what to fix
    # nor do invalid calls count towards their tool's repeats
    assert judged(invalid, loop_window=4, max_repeats=1, loop_key="tool")[0]["error_kind"] is None


def test_validate_args_refuses_an_identical_call_after_one_in_doubt_for_the_rest_of_the_run():
    # out of every window: the doubt is kept apart, for the whole run
    (checked,) = judged([], doubtful=[SIG], max_repeats=5)
    assert checked["error_kind"] == "repeated_call"
    assert checked["error"] == IN_DOUBT_REPEAT_TEMPLATE.format(name="add")
    assert judged([], doubtful=[SIG], calls=[call("add", {"a": 2, "b": 2})])[0]["error_kind"] is None


def test_validate_args_answers_an_identical_call_after_a_success_from_cache():
    (checked,) = judged([[rec("ok", "3")], [rec("failed", signature="other")]], loop_window=3)
    assert (checked["error_kind"], checked["cached"]) == (None, "3")
    # the latest outcome counts: a success after a failure, and a failure after a success
    assert judged([[rec("failed")], [rec("ok", "3")]])[0]["cached"] == "3"
    assert judged([[rec("ok", "3")], [rec("failed")]])[0].get("cached") is None
    # beyond loop_window but within the dead-loop horizon (3 + 5 decisions): still known
    assert judged([[rec("ok", "3")], [], [], [], []], loop_window=3)[0]["cached"] == "3"
    # out of the horizon, or a tool that opted out: the call runs
    no_feedback = {"repeats_after_feedback": 0, "repeats_after_cache": 0}
    assert judged([[rec("ok", "3")], [], []], loop_window=3, **no_feedback)[0].get("cached") is None
    registry = ToolRegistry()
    registry.add(add, cacheable=False)
    assert judged([[rec("ok", "3")]], tools=registry)[0] == judged([], tools=registry)[0]


def test_validate_args_ends_a_repeat_after_more_feedback_than_allowed_as_a_dead_loop():
    window = [[rec("ok", "3")], [rec("cached", "3")]]
    assert judged(window, repeats_after_cache=1)[0]["cached"] == "3"  # one repeat after the feedback
    # answers from cache and refusals are counted apart: no refusal here, so repeats_after_feedback=0 allows it
    assert judged(window, repeats_after_cache=1, repeats_after_feedback=0)[0]["cached"] == "3"
    (checked,) = judged(window, repeats_after_cache=0)
    assert checked["error_kind"] == "repeat_after_feedback" and "ends the run as a dead loop" in checked["error"]
    assert "answered from cache 1 times" in checked["error"]
    (checked,) = judged([[rec("refused")], [rec("refused")]], repeats_after_feedback=1, repeats_after_cache=5)
    assert checked["error_kind"] == "repeat_after_feedback" and "refused 2 times" in checked["error"]
    # within one decision: the third identical call after a success is the second repeat after feedback
    calls = [call("add", {"a": 1, "b": 2}, f"c{n}") for n in range(3)]
    kinds = [(c["error_kind"], c.get("cached")) for c in judged([[rec("ok", "3")]], calls=calls, repeats_after_cache=1)]
    assert kinds == [(None, "3"), (None, "3"), ("repeat_after_feedback", None)]


def other_add(outcome, result=None, b=9, name="add"):
    """A record of an add call with other arguments than SIG's."""
    return rec(outcome, result, signature=f'add{{"a": 1, "b": {b}}}', name=name)


def test_keyed_on_the_tool_calls_with_other_arguments_count_as_repeats():
    window = [[other_add("ok", "10")], [other_add("failed", b=8)]]
    (checked,) = judged(window, loop_key="tool")
    assert checked["error_kind"] == "repeated_call"
    assert checked["error"] == "Error: not run: 'add' was called 3 times in 3 decisions. Use another tool, or answer."
    # keyed on the call (the default), other arguments are another call: it runs
    assert judged(window)[0]["error_kind"] is None
    assert judged(window, loop_key="call")[0]["error_kind"] is None
    # calls of other tools do not count towards it
    others = [[other_add("ok", "x", name="lookup")], [other_add("ok", "y", name="explode")]]
    assert judged(others, loop_key="tool")[0]["error_kind"] is None


def test_keyed_on_the_tool_an_answer_from_cache_still_needs_the_identical_call():
    assert judged([[rec("ok", "3", name="add")]], loop_key="tool")[0]["cached"] == "3"
    assert judged([[other_add("ok", "10")]], loop_key="tool")[0].get("cached") is None
    # but it counts towards the tool: the cached answers of other add calls make this one a dead loop
    window = [[other_add("cached", "10")], [other_add("cached", "11", b=7)]]
    (checked,) = judged(window, loop_key="tool", repeats_after_cache=1, max_repeats=5)
    assert checked["error_kind"] == "repeat_after_feedback"
    assert "Calls of 'add' were already answered from cache 2 times" in checked["error"]
    assert judged(window, repeats_after_cache=1, max_repeats=5)[0]["error_kind"] is None


def test_keyed_on_the_tool_refusals_of_other_arguments_end_in_a_dead_loop():
    window = [[other_add("refused")], [other_add("refused", b=8)]]
    (checked,) = judged(window, loop_key="tool", repeats_after_feedback=1)
    assert checked["error_kind"] == "repeat_after_feedback"
    assert "Calls of 'add' were already refused 2 times" in checked["error"]
    assert judged(window, repeats_after_feedback=1)[0]["error_kind"] is None


def test_a_record_saved_without_its_tool_name_counts_by_its_call_only():
    # saved before records named their tool: it counts towards its call, and towards no tool
    ok = rec("ok", "3")
    assert judged([[ok], [ok]], tools=uncached_add())[0]["error_kind"] == "repeated_call"
    assert judged([[rec("failed")], [rec("failed")]], loop_key="tool")[0]["error_kind"] is None
    # its result still answers the identical call from cache
    assert judged([[rec("ok", "3")]], loop_key="tool")[0]["cached"] == "3"


def test_a_re_plan_in_place_of_a_dead_loop_never_lets_the_known_call_run_again():
    fetch, runs = counting_tool()
    script = [tool_call("fetch", {"page": 1})] * 5 + ["done"]
    agent, model = make_agent(script, tools=[fetch], repeats_after_cache=1, repeats_after_feedback=0, max_replans=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], runs) == ("dead_loop", 5, [1])
    replan = next(n for n, call in enumerate(model.calls) if call.messages[-1].text.startswith("Re-plan (1 of 1)"))
    assert replan == 4 and "you keep making calls whose results you already have" in model.calls[4].messages[-1].text
    # a model that takes the re-plan and answers ends well
    fetch, runs = counting_tool()
    script = [tool_call("fetch", {"page": 1})] * 4 + ["done"]
    agent, model = make_agent(script, tools=[fetch], repeats_after_cache=1, repeats_after_feedback=0, max_replans=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["final_answer"], runs) == ("answered", "done", [1])


def test_an_identical_call_after_a_success_is_answered_from_cache_without_running():
    fetch, runs = counting_tool()
    agent, model = make_agent([tool_call("fetch", {"page": 1})] * 2 + ["done"], tools=[fetch])
    result = agent.invoke({"task": "t"}, THREAD)
    assert result["finish_reason"] == "answered" and runs == [1]  # the second call never ran
    first = model.calls[1].messages[-1]
    # the answer from cache holds the first result, so the first call's entry left the window as its repeat
    (second,) = tool_messages(result)
    assert second.content == CACHED_RESULT_TEMPLATE.format(result=first.content) and second.status == "success"
    assert second.tool_call_id == result["messages"][-3].tool_calls[0]["id"]  # the result of that call
    assert model.calls[2].messages[-1].content == second.content
    assert [m.content for m in model.calls[2].messages if isinstance(m, ToolMessage)] == [second.content]


def test_a_tool_that_opted_out_of_the_cache_runs_again():
    fetch, runs = counting_tool()
    fetch.metadata = {"reinloop": {"cacheable": False}}
    agent, model = make_agent([tool_call("fetch", {"page": 1})] * 2 + ["done"], tools=[fetch])
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"
    assert runs == [1, 1] and model.calls[2].messages[-1].content == "page 1: nothing new"


@pytest.mark.parametrize("max_repeats", [1, 2])
def test_an_identical_call_after_a_failure_runs_again_past_max_repeats(max_repeats):
    runs = []

    @tool
    def flaky(page: int) -> str:
        """Fetch a page from a service that is down."""
        runs.append(page)
        raise ToolException("the service is down")

    script = [tool_call("flaky", {"page": 1})] * (max_repeats + 2) + ["gave up"]
    # one attempt per call: the model's repeats are what is counted, not retries in place
    agent, model = make_agent(
        script, tools=[flaky], max_repeats=max_repeats, error_threshold=10, tool_attempts=1, guards=NO_CIRCUIT
    )
    result = agent.invoke({"task": "t"}, THREAD)
    assert runs == [1] * (max_repeats + 2)  # each retry ran: a fault may pass
    assert all(call.messages[-1].text.startswith("Error: 'flaky' failed") for call in model.calls[1:])
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", max_repeats + 2)


@pytest.mark.parametrize(("declared", "runs_expected"), [({"idempotent": False}, 1), ({}, 2)])
def test_a_lost_connection_stops_an_identical_repeat_only_of_a_tool_declared_not_idempotent(declared, runs_expected):
    sent = []

    @tool
    def send(text: str) -> str:
        """Send a message; each call sends one."""
        sent.append(text)
        raise ConnectionResetError("the connection was reset")

    send.metadata = {"reinloop": declared}
    script = [tool_call("send", {"text": "hi"})] * 2 + [tool_call("send", {"text": "other"}), "done"]
    agent, model = make_agent(script, tools=[send], error_threshold=10)
    result = agent.invoke({"task": "t"}, THREAD)
    assert sent == ["hi"] * runs_expected + ["other"]  # never retried in place; other arguments run
    second = model.calls[2].messages[-1]
    if runs_expected == 1:
        assert second.content == IN_DOUBT_REPEAT_TEMPLATE.format(name="send")
    else:
        assert "may or may not have had its effect" in second.content
    assert result["finish_reason"] == "answered"


def test_the_refusal_after_a_call_in_doubt_lasts_the_run_past_the_dead_loop_horizon():
    sent = []

    @tool
    def send(text: str) -> str:
        """Send a message; each call sends one."""
        sent.append(text)
        raise ConnectionResetError("the connection was reset")

    send.metadata = {"reinloop": {"idempotent": False}}
    hi = tool_call("send", {"text": "hi"})
    script = [hi, *(tool_call("add", {"a": n, "b": 1}) for n in range(4)), hi, "done"]
    horizon_of_one = {"loop_window": 1, "repeats_after_feedback": 0, "repeats_after_cache": 0}
    agent, model = make_agent(script, tools=[send, add], **horizon_of_one)
    result = agent.invoke({"task": "t"}, THREAD)
    assert sent == ["hi"] and result["finish_reason"] == "answered"
    assert model.calls[6].messages[-1].content == IN_DOUBT_REPEAT_TEMPLATE.format(name="send")
    assert result["doubtful_calls"] == ['send{"text": "hi"}']


@pytest.mark.parametrize("repeats_after_cache", [0, 1, 2])
def test_dead_loop_trips_only_after_the_allowed_repeats_answered_from_cache(repeats_after_cache):
    fetch, runs = counting_tool()
    calls = 2 + repeats_after_cache  # a run, the feedback (an answer from cache), the allowed repeats
    script = [tool_call("fetch", {"page": 1})] * (calls + 1)
    # repeats_after_feedback=0: refusals are counted apart, and there are none here
    agent, model = make_agent(
        script,
        tools=[fetch],
        repeats_after_cache=repeats_after_cache,
        repeats_after_feedback=0,
        loop_window=5,
        max_replans=0,
        max_stalled=10,  # the rule under test trips first
    )
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], runs) == ("dead_loop", calls + 1, [1])
    assert model.remaining == 0
    observations = [call.messages[-1] for call in model.calls[1:]]
    assert observations[0].content == "page 1: nothing new"  # the run, then answers from cache
    assert all(m.status == "success" and m.content.startswith("Not run again") for m in observations[1:])
    refused = tool_messages(result)[-1]
    assert refused.status == "error" and "ends the run as a dead loop" in refused.content
    assert "dead loop" in result["messages"][-1].content
    assert pairing_violations(result["messages"][:-1]) == []


def test_a_failing_call_repeated_ends_as_an_error_streak_after_the_reflection_turn():
    script = [tool_call("explode", {"reason": "x"})] * 5
    agent, model = make_agent(script, error_threshold=3, max_replans=0, guards=NO_CIRCUIT)
    result = agent.invoke({"task": "t"}, THREAD)
    seen = [call.messages[-1].content.split(".")[0] for call in model.calls[1:]]
    error = "Error: 'explode' failed (3 attempts): ZeroDivisionError: division by zero"
    assert seen[:2] == [error] * 2 and seen[2].startswith("Your last 3 attempts failed")
    assert result["messages"][-2].content.split(".")[0] == error  # the fourth: it ran, and failed
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 4, 1)


def test_the_repeat_guards_work_with_the_json_protocol():
    fetch, runs = counting_tool()
    script = [json_action("fetch", {"page": 1})] * 2 + [json_action("final_answer", "nothing new")]
    agent, model = make_agent(script, tools=[fetch], protocol="json")
    result = agent.invoke({"task": "t"}, THREAD)
    assert result["finish_reason"] == "answered" and runs == [1]
    assert model.calls[2].messages[-1].content == "Observation: " + CACHED_RESULT_TEMPLATE.format(
        result="page 1: nothing new"
    )


def test_a_continued_thread_answers_from_the_cache_in_its_saved_state(saver):
    fetch, runs = counting_tool()
    first, _ = make_agent([tool_call("fetch", {"page": 1})], tools=[fetch], checkpointer=saver)
    first.invoke({"task": "t"}, THREAD, interrupt_after=["check_finish"])
    # another agent (another process, say) continues the saved thread: it knows the call only from state
    second, _ = make_agent([tool_call("fetch", {"page": 1}), "done"], tools=[fetch], checkpointer=saver)
    result = second.invoke(None, THREAD)
    assert result["finish_reason"] == "answered" and runs == [1]
    assert tool_messages(result)[-1].content.startswith("Not run again")


def test_different_arguments_are_not_a_dead_loop():
    fetch, runs = counting_tool()
    agent, _ = make_agent([tool_call("fetch", {"page": p}) for p in range(5)] + ["done"], tools=[fetch])
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"
    assert runs == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("loop_key", "finish", "ran", "seen"),
    [
        ("call", "answered", [0, 1, 2, 3, 4], []),
        ("tool", "dead_loop", [0, 1], ["'fetch' was called 3 times", "'fetch' was called 3 times", "dead loop"]),
    ],
)
def test_keyed_on_the_tool_a_tool_called_again_and_again_with_new_arguments_is_a_dead_loop(loop_key, finish, ran, seen):
    fetch, runs = counting_tool()
    script = [tool_call("fetch", {"page": p}) for p in range(5)] + ["done"]
    agent, model = make_agent(script, tools=[fetch], loop_key=loop_key, repeats_after_feedback=1, max_replans=0)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], runs) == (finish, ran)
    # every observation the model was sent (a refusal it moved past leaves the window), and the last one
    observed = {m.tool_call_id: m.text for call in model.calls for m in call.messages if isinstance(m, ToolMessage)}
    observed.update((m.tool_call_id, m.text) for m in tool_messages(result))
    refusals = [text for text in observed.values() if text.startswith("Error: not run")]
    assert len(refusals) == len(seen) and all(part in text for part, text in zip(seen, refusals, strict=True))


def test_resume_after_a_dead_loop_forgets_the_recent_calls():
    runs = []

    @tool
    def fetch(page: int) -> str:
        """Fetch one page."""
        runs.append(page)
        return f"page {page}"

    # a run, an answer from cache, one allowed repeat after it, and the repeat that is a dead loop
    script = [tool_call("fetch", {"page": 1})] * 4 + [tool_call("fetch", {"page": 1}), "page 1"]
    agent, _ = make_agent(script, tools=[fetch], repeats_after_cache=1, max_replans=0)
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "dead_loop"
    assert runs == [1]
    result = resume(agent, THREAD, hint="Fetch it once more if you must.")
    assert result["finish_reason"] == "answered" and result["call_window"][-1][0]["outcome"] == "ok"
    assert runs == [1, 1]  # the cleared window neither answered it from cache nor refused it
