"""The error-streak guard (`reinloop.guards.error_streak`): errors in a row end the run, after a reflection turn
that lists what failed and any re-plan turns left; a real success resets the streak. Node level and end to end."""

from langchain_core.messages import HumanMessage

from reinloop import resume
from reinloop.guards.error_streak import REFLECTION_TEMPLATE
from reinloop.nodes import check_finish
from reinloop.state import act
from reinloop.testing import json_action, tool_call
from tests.conftest import THREAD, counting_tool, frozen_call, lookup, make_agent, make_context


def test_error_streak_trips_when_errors_continue_after_the_reflection_turn():
    script = [
        tool_call("lookup", {"key": "nowhere"}),
        tool_call("explode", {"reason": "r"}),
        tool_call("lookup", {"key": "elsewhere"}),
        tool_call("lookup", {"key": "anywhere"}),
    ]
    agent, model = make_agent(script, error_threshold=3, max_replans=0)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("error_streak", None, 4)
    final = result["messages"][-1]
    assert final.name == "circuit_break" and "4 errors in a row" in final.content
    assert """The last one: lookup({"key": "anywhere"}): Error: 'lookup' failed: unknown key""" in final.content
    assert model.remaining == 0  # no extra model call after the break
    # the fourth decision was the reflection turn: what failed, one line per error, then a different approach
    reflection = model.calls[3].messages[-1]
    assert isinstance(reflection, HumanMessage) and reflection.content.startswith("Your last 3 attempts failed:")
    lines = reflection.content.splitlines()[1:4]
    assert lines[0].startswith("- lookup({\"key\": \"nowhere\"}): Error: 'lookup' failed: unknown key 'nowhere'")
    assert lines[1].startswith('- explode({"reason": "r"}): Error: \'explode\' failed (3 attempts): ZeroDivisionError')
    assert lines[2].startswith('- lookup({"key": "elsewhere"}): Error: \'lookup\' failed: unknown key')
    assert "Try another tool, other arguments, or answer" in reflection.content
    # shown once: not in the window, not in earlier prompts
    assert all("attempts failed" not in m.text for m in result["messages"])
    assert all("attempts failed" not in call.messages[-1].text for call in model.calls[:3])


def test_the_model_s_own_mistakes_are_not_errors_of_the_streak():
    # an unknown tool, invalid arguments and an unreadable reply, in turn with a failing call: each of them gets
    # its feedback, the streak counts the failing calls alone
    mistakes = [tool_call("nope"), tool_call("add", {"a": "x", "b": 1}), ""]
    script = [call for n, mistake in enumerate(mistakes) for call in (mistake, tool_call("lookup", {"key": str(n)}))]
    config = {"error_threshold": 3, "error_reflection": False, "max_parse_retries": 0, "max_replans": 0}
    agent, model = make_agent([*script, "done"], **config)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 6, 1)
    assert "3 errors in a row" in result["messages"][-1].content
    feedback = [call.messages[-1].text for call in model.calls[1:]]
    assert "'nope' is not a valid tool" in feedback[0] and "invalid arguments for 'add'" in feedback[2]


def test_re_plan_turns_come_in_place_of_the_error_streak_then_it_trips():
    # errors only: a reflection at 3, a re-plan at 4 and at 5 (the streak goes on counting), then error_streak
    script = [tool_call("explode", {"reason": str(n)}) for n in range(12)]
    agent, model = make_agent(script, error_threshold=3, max_replans=2, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 6, 6)
    turns = [(n, call.messages[-1].text.split(":")[0]) for n, call in enumerate(model.calls) if n]
    turns = [(n, first) for n, first in turns if not first.startswith("Error")]
    assert turns == [(3, "Your last 3 attempts failed"), (4, "Re-plan (1 of 2)"), (5, "Re-plan (2 of 2)")]
    assert model.calls[4].messages[-1].text.endswith("1 more re-plan is left.")
    replan = model.calls[5].messages[-1].text
    assert replan.endswith("If this goes on, the run stops.") and "- explode(" in replan
    assert result["replans"] == 2 and "6 errors in a row" in result["messages"][-1].content


def test_re_plans_come_out_of_one_budget_for_the_run_a_success_between_streaks_gives_no_new_ones():
    fetch, runs = counting_tool()
    script = [tool_call("lookup", {"key": str(n)}) for n in range(4)] + [tool_call("fetch", {"page": 1})]
    script += [tool_call("lookup", {"key": str(n)}) for n in range(4, 8)] + ["done"]
    agent, model = make_agent(script, tools=[fetch, lookup], error_threshold=3, max_replans=1, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    # the success after the re-plan ended the first streak; the second one stops at its first trip
    assert (result["finish_reason"], result["iteration"], runs, model.remaining) == ("error_streak", 9, [1], 1)
    replans = [n for n, call in enumerate(model.calls) if call.messages[-1].text.startswith("Re-plan (1 of 1)")]
    assert replans == [4]


def test_without_error_reflection_the_streak_trips_at_the_threshold():
    script = [
        tool_call("explode", {"reason": "x"}),
        tool_call("lookup", {"key": "x"}),
        tool_call("explode", {"reason": "r"}),
    ]
    agent, model = make_agent(script, error_threshold=3, error_reflection=False, max_replans=0)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 3, 0)
    assert "3 errors in a row" in result["messages"][-1].content


def test_a_model_that_recovers_after_the_reflection_turn_goes_on_and_gets_a_new_one_per_streak():
    script = [tool_call("explode", {"reason": "x"})] * 3 + [tool_call("add", {"a": 1, "b": 1})]
    script += [tool_call("explode", {"reason": str(n)}) for n in range(3)] + ["2"]
    agent, model = make_agent(script, error_threshold=3, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "2")
    reflections = [n for n, call in enumerate(model.calls) if "attempts failed" in call.messages[-1].text]
    assert reflections == [3, 7]  # after each streak of three, once
    assert result["reflected_at"] == 3 and result["reflection"] is None


def test_an_answer_from_cache_on_the_reflection_turn_does_not_trip_the_breaker():
    script = [tool_call("add", {"a": 1, "b": 1})] + [tool_call("explode", {"reason": str(n)}) for n in range(3)]
    script += [tool_call("add", {"a": 1, "b": 1}), "2"]
    agent, _ = make_agent(script, error_threshold=3, loop_window=5)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 3)


def test_the_reflection_turn_works_with_the_json_protocol():
    script = [json_action("explode", {"reason": str(n)}) for n in range(3)] + [json_action("final_answer", "sorry")]
    agent, model = make_agent(script, protocol="json", error_threshold=3)
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"
    assert model.calls[3].messages[-1].content.startswith("Your last 3 attempts failed:\n- explode(")


def test_a_continued_thread_keeps_its_reflection_turn_in_saved_state(saver):
    script = [tool_call("explode", {"reason": str(n)}) for n in range(3)]
    first, _ = make_agent(script, checkpointer=saver, max_replans=0)
    first.invoke({"task": "t"}, THREAD, interrupt_after=["check_finish"])
    first.invoke(None, THREAD, interrupt_after=["check_finish"])
    first.invoke(None, THREAD, interrupt_after=["check_finish"])
    assert first.get_state(THREAD).values["reflected_at"] == 3
    # another agent continues the saved thread: the reflection comes from state, and it was the streak's one
    second, model = make_agent([tool_call("explode", {"reason": "3"})], checkpointer=saver, max_replans=0)
    result = second.invoke(None, THREAD)
    assert model.calls[0].messages[-1].content.startswith("Your last 3 attempts failed:")
    assert (result["finish_reason"], result["iteration"]) == ("error_streak", 4)


def test_a_real_success_resets_the_error_streak():
    script = [
        tool_call("explode", {"reason": "x"}),
        tool_call("explode", {"reason": "x"}),
        tool_call("add", {"a": 1, "b": 1}),
        tool_call("explode", {"reason": "x"}),
        tool_call("explode", {"reason": "x"}),
        "done",
    ]
    agent, _ = make_agent(script, error_threshold=3)
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"


def test_check_finish_grants_one_reflection_turn_with_what_failed():
    state = {"decision": act([]), "checks": [], "consecutive_errors": 3, "streak_errors": ["a(1): boom", "b(): no"]}
    update = frozen_call(check_finish, state, make_context(error_threshold=3))
    assert (update["finish_reason"], update["reflected_at"]) == (None, 3)
    assert update["reflection"] == REFLECTION_TEMPLATE.format(count=3, errors="- a(1): boom\n- b(): no")
    # once per streak: the same count again goes on without a new turn, one more error trips
    update = check_finish({**state, "reflected_at": 3}, make_context(error_threshold=3))
    assert (update["finish_reason"], "reflection" in update) == (None, False)
    assert check_finish({**state, "reflected_at": 2}, make_context(max_replans=0))["finish_reason"] == "error_streak"
    # a breaker that trips anyway wins: no reflection turn on the last round
    update = check_finish({**state, "iterations_left": 1}, make_context())
    assert (update["finish_reason"], "reflection" in update) == ("max_iterations", False)
    update = check_finish(state, make_context(error_reflection=False, max_replans=0))
    assert (update["finish_reason"], "reflection" in update) == ("error_streak", False)


def test_the_reflection_turn_lists_an_error_that_came_again_once_with_its_count():
    lines = ["a(1): boom", "b(): no", "a(1): boom"]
    state = {"decision": act([]), "checks": [], "consecutive_errors": 3, "streak_errors": lines}
    update = check_finish(state, make_context(error_threshold=3))
    assert update["reflection"] == REFLECTION_TEMPLATE.format(count=3, errors="- a(1): boom (2 times)\n- b(): no")


def test_resume_after_an_error_streak_clears_the_streak():
    # two errors, the reflection turn, a third error: error_streak
    script = [tool_call("explode", {"reason": "x"})] * 3 + [tool_call("add", {"a": 1, "b": 1}), "2"]
    agent, _ = make_agent(script, error_threshold=2, loop_window=1, max_replans=0)
    broken = agent.invoke({"task": "t"}, THREAD)
    assert (broken["finish_reason"], broken["reflected_at"]) == ("error_streak", 2)
    result = resume(agent, THREAD)
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 0)
    assert (result["reflected_at"], result["streak_errors"], result["reflection"]) == (None, [], None)
