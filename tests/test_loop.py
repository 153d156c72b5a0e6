"""The compiled graph run end to end with the scripted model and a checkpointer: one test per edge."""

import asyncio
import itertools

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from reinloop import AgentConfig, AgentInput, ConfigurationError, InputError, build_agent
from reinloop.memory import pairing_violations
from reinloop.memory.summary import is_summary_request
from reinloop.memory.window import CACHED_RESULT_TEMPLATE
from reinloop.testing import ScriptedChatModel, ScriptExhaustedError, json_action, parallel_calls, tool_call
from tests.conftest import NO_CIRCUIT, THREAD, add, explode, lookup, make_agent


def tool_messages(result):
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def counting_tool():
    runs = []

    @tool
    def fetch(page: int) -> str:
        """Fetch one page of results."""
        runs.append(page)
        return f"page {page}: nothing new"

    return fetch, runs


def test_happy_path_calls_a_tool_then_answers():
    agent, model = make_agent([tool_call("add", {"a": 2, "b": 3}), "2 + 3 = 5"])
    result = agent.invoke({"task": "What is 2 + 3?"}, THREAD)
    assert (result["final_answer"], result["finish_reason"], result["iteration"]) == ("2 + 3 = 5", "answered", 2)
    assert [m.content for m in tool_messages(result)] == ["5"]
    # the second decision saw the tool result
    assert model.calls[1].messages[-1].content == "5"
    assert model.remaining == 0


def test_bad_arguments_are_fed_back_and_corrected():
    agent, model = make_agent([tool_call("add", {"a": "two", "b": 3}), tool_call("add", {"a": 2, "b": 3}), "5"])
    result = agent.invoke({"task": "add"}, THREAD)
    feedback = model.calls[1].messages[-1]
    assert feedback.status == "error" and "a: Input should be a valid integer" in feedback.content
    # once corrected, the failed call leaves the window: it is not sent again, in full or as a digest
    (success,) = tool_messages(result)
    assert success.content == "5"
    assert not result.get("pending")
    last_prompt = model.calls[2].messages
    assert not any("Input should be" in m.text or '"two"' in str(m.tool_calls if isinstance(m, AIMessage) else "")
                   for m in last_prompt)  # fmt: skip
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 0)


def test_unknown_tool_lists_the_valid_ones():
    agent, _ = make_agent([tool_call("multiply", {"a": 2, "b": 3}), "6"])
    result = agent.invoke({"task": "multiply"}, THREAD)
    (feedback,) = tool_messages(result)
    assert "'multiply' is not a valid tool. Call one of [add, lookup, explode]" in feedback.content
    assert result["finish_reason"] == "answered"


def test_parse_retry_sends_the_correction_hint_then_succeeds():
    agent, model = make_agent(
        ["I'll add: {action: add}", json_action("add", {"a": 1, "b": 1}), json_action("final_answer", "2")],
        protocol="json",
    )
    result = agent.invoke({"task": "1+1"}, THREAD)
    assert (result["final_answer"], result["finish_reason"]) == ("2", "answered")
    hint = model.calls[1].messages[-1]
    assert isinstance(hint, HumanMessage)
    assert "could not be read" in hint.content and "{action: add}" in hint.content and '"action_input"' in hint.content
    # the garbage reply never entered the window, and the retry did not count as a round or an error
    assert all("{action: add}" not in m.text for m in result["messages"])
    assert result["iteration"] == 2 and result["consecutive_errors"] == 0


def test_parse_retries_exhausted_becomes_an_error_observation():
    agent, model = make_agent(
        ["garbage 1", "garbage 2", json_action("final_answer", "ok")], protocol="json", max_parse_retries=1
    )
    result = agent.invoke({"task": "t"}, THREAD)
    assert result["finish_reason"] == "answered"
    note = model.calls[2].messages[-1]
    assert isinstance(note, HumanMessage) and note.content.startswith("Error: your reply could not be read")
    assert result["iteration"] == 2


def test_tool_exception_is_fed_back_and_the_model_recovers():
    agent, model = make_agent([tool_call("explode", {"reason": "x"}), tool_call("add", {"a": 1, "b": 1}), "2"])
    result = agent.invoke({"task": "t"}, THREAD)
    error = model.calls[1].messages[-1]
    assert "ZeroDivisionError" in error.content and error.status == "error"
    (success,) = tool_messages(result)  # the failed call, once got past, left the window
    assert not result.get("pending") and "ZeroDivisionError" not in str(model.calls[2].messages)
    assert success.content == "2"
    assert result["finish_reason"] == "answered" and result["consecutive_errors"] == 0


def test_a_hung_tool_times_out_without_hanging_the_loop(gate):
    agent, _ = make_agent(
        [tool_call("hang", {"seconds": 999}), "gave up waiting"], tools=[gate.tool], tool_timeout_s=0.2
    )
    result = agent.invoke({"task": "t"}, THREAD)
    (observation,) = tool_messages(result)
    assert "gave no result within 0.2 s" in observation.content
    assert gate.entered.is_set() and result["finish_reason"] == "answered"


def test_pseudo_success_counts_as_an_error():
    agent, _ = make_agent([tool_call("lookup", {"key": "empty"}), "nothing found"])
    result = agent.invoke({"task": "t"}, THREAD)
    (observation,) = tool_messages(result)
    assert observation.status == "error" and "returned empty text" in observation.content
    assert result["consecutive_errors"] == 1


def test_error_streak_trips_when_errors_continue_after_the_reflection_turn():
    script = [
        tool_call("nope"),
        tool_call("add", {"a": "x", "b": 1}),
        tool_call("explode", {"reason": "r"}),
        tool_call("lookup", {"key": "nowhere"}),
    ]
    agent, model = make_agent(script, error_threshold=3, max_replans=0)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["final_answer"], result["iteration"]) == ("error_streak", None, 4)
    final = result["messages"][-1]
    assert final.name == "circuit_break" and "4 errors in a row" in final.content
    assert model.remaining == 0  # no extra model call after the break
    # the fourth decision was the reflection turn: what failed, one line per error, then a different approach
    reflection = model.calls[3].messages[-1]
    assert isinstance(reflection, HumanMessage) and reflection.content.startswith("Your last 3 attempts failed:")
    lines = reflection.content.splitlines()[1:4]
    assert lines[0].startswith("- nope({}): Error: 'nope' is not a valid tool")
    assert lines[1].startswith('- add({"a": "x", "b": 1}): Error: invalid arguments for \'add\': a:')
    assert lines[2].startswith('- explode({"reason": "r"}): Error: \'explode\' failed (3 attempts): ZeroDivisionError')
    assert "Try another tool, other arguments, or answer" in reflection.content
    # shown once: not in the window, not in earlier prompts
    assert all("attempts failed" not in m.text for m in result["messages"])
    assert all("attempts failed" not in call.messages[-1].text for call in model.calls[:3])


def test_re_plan_turns_come_in_place_of_the_error_streak_then_it_trips():
    # errors only: a reflection at 3, a re-plan at 4 and at 5 (the streak goes on counting), then error_streak
    script = [tool_call("nope", {"n": n}) for n in range(12)]
    agent, model = make_agent(script, error_threshold=3, max_replans=2, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 6, 6)
    turns = [(n, call.messages[-1].text.split(":")[0]) for n, call in enumerate(model.calls) if n]
    turns = [(n, first) for n, first in turns if not first.startswith("Error")]
    assert turns == [(3, "Your last 3 attempts failed"), (4, "Re-plan (1 of 2)"), (5, "Re-plan (2 of 2)")]
    assert model.calls[4].messages[-1].text.endswith("1 more re-plan is left.")
    replan = model.calls[5].messages[-1].text
    assert replan.endswith("If this goes on, the run stops.") and "- nope(" in replan
    assert result["replans"] == 2 and "6 errors in a row" in result["messages"][-1].content


def test_re_plans_come_out_of_one_budget_for_the_run_a_success_between_streaks_gives_no_new_ones():
    fetch, runs = counting_tool()
    script = [tool_call("nope", {"n": n}) for n in range(4)] + [tool_call("fetch", {"page": 1})]
    script += [tool_call("nope", {"n": n}) for n in range(4, 8)] + ["done"]
    agent, model = make_agent(script, tools=[fetch], error_threshold=3, max_replans=1, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    # the success after the re-plan ended the first streak; the second one stops at its first trip
    assert (result["finish_reason"], result["iteration"], runs, model.remaining) == ("error_streak", 9, [1], 1)
    replans = [n for n, call in enumerate(model.calls) if call.messages[-1].text.startswith("Re-plan (1 of 1)")]
    assert replans == [4]


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


def test_without_error_reflection_the_streak_trips_at_the_threshold():
    script = [tool_call("nope"), tool_call("add", {"a": "x", "b": 1}), tool_call("explode", {"reason": "r"})]
    agent, model = make_agent(script, error_threshold=3, error_reflection=False, max_replans=0)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], model.remaining) == ("error_streak", 3, 0)
    assert "3 errors in a row" in result["messages"][-1].content


def test_a_model_that_recovers_after_the_reflection_turn_goes_on_and_gets_a_new_one_per_streak():
    script = [tool_call("nope")] * 3 + [tool_call("add", {"a": 1, "b": 1})]
    script += [tool_call("nope", {"n": n}) for n in range(3)] + ["2"]
    agent, model = make_agent(script, error_threshold=3, loop_window=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["final_answer"]) == ("answered", "2")
    reflections = [n for n, call in enumerate(model.calls) if "attempts failed" in call.messages[-1].text]
    assert reflections == [3, 7]  # after each streak of three, once
    assert result["reflected_at"] == 3 and result["reflection"] is None


def test_an_answer_from_cache_on_the_reflection_turn_does_not_trip_the_breaker():
    script = [tool_call("add", {"a": 1, "b": 1})] + [tool_call("nope", {"n": n}) for n in range(3)]
    script += [tool_call("add", {"a": 1, "b": 1}), "2"]
    agent, _ = make_agent(script, error_threshold=3, loop_window=5)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", 3)


def test_the_reflection_turn_works_with_the_json_protocol():
    script = [json_action("nope", {"n": n}) for n in range(3)] + [json_action("final_answer", "sorry")]
    agent, model = make_agent(script, protocol="json", error_threshold=3)
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"
    assert model.calls[3].messages[-1].content.startswith("Your last 3 attempts failed:\n- nope(")


def test_a_continued_thread_keeps_its_reflection_turn_in_saved_state(saver):
    script = [tool_call("nope", {"n": n}) for n in range(3)]
    first, _ = make_agent(script, checkpointer=saver, max_replans=0)
    first.invoke({"task": "t"}, THREAD, interrupt_after=["check_finish"])
    first.invoke(None, THREAD, interrupt_after=["check_finish"])
    first.invoke(None, THREAD, interrupt_after=["check_finish"])
    assert first.get_state(THREAD).values["reflected_at"] == 3
    # another agent continues the saved thread: the reflection comes from state, and it was the streak's one
    second, model = make_agent([tool_call("nope", {"n": 3})], checkpointer=saver, max_replans=0)
    result = second.invoke(None, THREAD)
    assert model.calls[0].messages[-1].content.startswith("Your last 3 attempts failed:")
    assert (result["finish_reason"], result["iteration"]) == ("error_streak", 4)


def test_a_real_success_resets_the_error_streak():
    script = [
        tool_call("nope"),
        tool_call("nope"),
        tool_call("add", {"a": 1, "b": 1}),
        tool_call("nope"),
        tool_call("nope"),
        "done",
    ]
    agent, _ = make_agent(script, error_threshold=3)
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"


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
def test_an_identical_call_after_a_failure_is_refused_once_it_exceeds_max_repeats(max_repeats):
    runs = []

    @tool
    def flaky(page: int) -> str:
        """Fetch a page from a service that is down."""
        runs.append(page)
        raise ToolException("the service is down")

    script = [tool_call("flaky", {"page": 1})] * (max_repeats + 1) + ["gave up"]
    # one attempt per call: the model's repeats are what is counted, not retries in place
    agent, _ = make_agent(script, tools=[flaky], max_repeats=max_repeats, error_threshold=10, tool_attempts=1)
    result = agent.invoke({"task": "t"}, THREAD)
    assert runs == [1] * max_repeats  # the model may retry up to max_repeats; the next one never runs
    refused = tool_messages(result)[-1]
    assert refused.status == "error" and refused.content.startswith("Error: not run")
    assert "Change the arguments or the tool" in refused.content
    # the refusal is the repeat guard's feedback, not another error of the streak
    assert (result["finish_reason"], result["consecutive_errors"]) == ("answered", max_repeats)


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


def test_a_failing_call_repeated_ends_as_a_dead_loop_after_its_refusal_and_the_allowed_repeat():
    script = [tool_call("explode", {"reason": "x"})] * 5
    agent, model = make_agent(script, error_threshold=10, repeats_after_feedback=1, max_replans=0, guards=NO_CIRCUIT)
    result = agent.invoke({"task": "t"}, THREAD)
    seen = [call.messages[-1].content.split(".")[0] for call in model.calls[1:]] + [tool_messages(result)[-1].content]
    error = "Error: 'explode' failed (3 attempts): ZeroDivisionError: division by zero"
    assert seen[:2] == [error] * 2
    assert all(text.startswith("Error: not run") for text in seen[2:4])
    assert "ends the run as a dead loop" in seen[4]
    assert (result["finish_reason"], result["iteration"]) == ("dead_loop", 5)


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


def test_max_iterations_ends_the_run_with_an_explanation():
    agent, model = make_agent([tool_call("add", {"a": i, "b": 0}) for i in range(10)], max_iterations=4)
    result = agent.invoke({"task": "t"}, THREAD)
    assert (result["finish_reason"], result["iteration"], result["final_answer"]) == ("max_iterations", 4, None)
    assert len(model.calls) == 4
    assert "no final answer after 4 rounds" in result["messages"][-1].content


def test_parallel_calls_each_get_exactly_one_result_rejected_ones_included():
    reply = parallel_calls([("add", {"a": 1, "b": 2}), ("nope", {}), ("add", {"a": "x"}), ("add", {"a": 3, "b": 4})])
    agent, _ = make_agent([reply, "done"])
    result = agent.invoke({"task": "t"}, THREAD)
    results = tool_messages(result)
    assert [m.tool_call_id for m in results] == [c["id"] for c in reply.tool_calls]
    assert [m.status for m in results] == ["success", "error", "error", "success"]
    assert [results[0].content, results[3].content] == ["3", "7"]
    assert pairing_violations(result["messages"][:-1]) == []


def test_every_model_call_sees_a_well_paired_bounded_window():
    seen = []

    def respond(messages):
        if is_summary_request(messages):  # a compaction's fold: the model is the summarizer
            return "Added numbers."
        seen.append(messages)
        assert pairing_violations(messages[1:]) == []  # after the task
        if len(seen) > 30:
            return "done"
        return parallel_calls(
            [("add", {"a": len(seen), "b": 0}), ("nope", {"i": len(seen)}), ("add", {"a": -len(seen), "b": 0})]
        )

    model = ScriptedChatModel(respond=respond, max_calls=60)
    agent = build_agent(
        model,
        [add],
        config=AgentConfig(memory_capacity=4, error_threshold=50, max_iterations=50),
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke({"task": "t"}, THREAD)
    assert result["finish_reason"] == "answered"
    # system + task + memory note + at most 4 entries of 1 call message and 3 results each
    assert max(len(m) for m in seen) <= 3 + 4 * 4


def test_a_new_task_on_a_finished_thread_starts_a_fresh_run():
    agent, _ = make_agent([tool_call("add", {"a": 1, "b": 1}), "2", "second answer"])
    agent.invoke({"task": "first"}, THREAD)
    result = agent.invoke({"task": "second"}, THREAD)
    assert (result["final_answer"], result["iteration"], result["task"]) == ("second answer", 1, "second")


def test_an_interrupt_inside_a_tool_pauses_the_graph_instead_of_being_swallowed():
    @tool
    def delete_file(path: str) -> str:
        """Delete a file after the operator approves."""
        approved = interrupt(f"delete {path}?")
        return "deleted" if approved else "kept"

    agent, _ = make_agent([tool_call("delete_file", {"path": "a.txt"}), "done"], tools=[delete_file])
    paused = agent.invoke({"task": "t"}, THREAD)
    assert paused["__interrupt__"][0].value == "delete a.txt?"
    result = agent.invoke(Command(resume=True), THREAD)
    assert tool_messages(result)[0].content == "deleted" and result["finish_reason"] == "answered"


def test_a_tool_not_safe_to_run_twice_that_asks_with_interrupt_runs_once_answered():
    """Its task is run again after the answer, as LangGraph does: it was asked, not stopped by a crash, so it
    does not fail closed as a call in flight at a crash does."""
    deleted = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file after the operator approves."""
        if interrupt(f"delete {path}?"):
            deleted.append(path)
            return "deleted"
        return "kept"

    delete_file.metadata = {"reinloop": {"idempotent": False}}
    agent, _ = make_agent([tool_call("delete_file", {"path": "a.txt"}), "done"], tools=[delete_file])
    assert agent.invoke({"task": "t"}, THREAD)["__interrupt__"][0].value == "delete a.txt?"
    result = agent.invoke(Command(resume=True), THREAD)
    assert (tool_messages(result)[0].content, result["in_doubt"], deleted) == ("deleted", [], ["a.txt"])


def test_async_tools_run_with_the_sync_loop():
    @tool
    async def slow_double(x: int) -> int:
        """Double a number, asynchronously."""
        await asyncio.sleep(0)
        return 2 * x

    agent, _ = make_agent([tool_call("slow_double", {"x": 21}), "42"], tools=[slow_double])
    assert tool_messages(agent.invoke({"task": "t"}, THREAD))[0].content == "42"


def test_the_graph_runs_async_too():
    agent, _ = make_agent([tool_call("add", {"a": 2, "b": 2}), "4"])
    result = asyncio.run(agent.ainvoke({"task": "t"}, THREAD))
    assert (result["final_answer"], tool_messages(result)[0].content) == ("4", "4")


def test_transient_model_errors_are_retried():
    agent, model = make_agent([ConnectionError("reset by peer"), "fine"], model_retry_backoff_s=0)
    assert agent.invoke({"task": "t"}, THREAD)["final_answer"] == "fine"
    assert len(model.calls) == 2


def test_a_developer_error_in_the_model_is_not_retried():
    agent, model = make_agent([ValueError("bad request"), "never"])
    with pytest.raises(ValueError, match="bad request"):
        agent.invoke({"task": "t"}, THREAD)
    assert len(model.calls) == 1


def test_the_scripted_model_fails_when_called_too_often():
    agent, _ = make_agent([tool_call("add", {"a": 1, "b": 1})])
    with pytest.raises(ScriptExhaustedError, match="only 1 replies"):
        agent.invoke({"task": "t"}, THREAD)


def test_plain_typed_callables_are_tools():
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    agent, _ = make_agent([tool_call("shout", {"text": "hi"}), "HI"], tools=[shout])
    assert tool_messages(agent.invoke({"task": "t"}, THREAD))[0].content == "HI"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([add, add], "duplicate tool name 'add'"),
        ([lambda x: x], "docstring"),
        (["not a tool"], "typed callables"),
    ],
    ids=["duplicate", "no-docstring", "not-callable"],
)
def test_bad_tools_fail_at_build_time(tools, message):
    with pytest.raises(ConfigurationError, match=message):
        build_agent(ScriptedChatModel(), tools)


def test_a_model_without_tool_calling_needs_the_json_protocol():
    with pytest.raises(ConfigurationError, match='protocol="json"'):
        build_agent(FakeListChatModel(responses=["x"]), [add])
    agent = build_agent(
        FakeListChatModel(responses=[json_action("final_answer", "hi")]), [add], config=AgentConfig(protocol="json")
    )
    assert agent.invoke({"task": "t"})["final_answer"] == "hi"


def test_a_model_string_without_credentials_is_a_clear_configuration_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match=r"cannot set up model 'openai:gpt-4o-mini'.*OPENAI_API_KEY"):
        build_agent("openai:gpt-4o-mini", [add])


def test_a_model_string_builds_a_real_chat_model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    agent = build_agent("openai:gpt-4o-mini", [add])
    assert "decide" in agent.get_graph().nodes


def test_runs_without_a_checkpointer():
    model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 1}), AIMessage("2")])
    assert build_agent(model, [add]).invoke({"task": "t"})["final_answer"] == "2"


def test_lookup_tool_exception_message_reaches_the_model():
    agent, model = make_agent([tool_call("lookup", {"key": "nowhere"}), "sorry"], tools=[lookup])
    agent.invoke({"task": "t"}, THREAD)
    assert "known keys: ['capital_of_france', 'empty']" in model.calls[1].messages[-1].content


def test_explode_is_reported_not_raised():
    agent, _ = make_agent([tool_call("explode", {"reason": "r"}), "ok"], tools=[explode])
    assert agent.invoke({"task": "t"}, THREAD)["finish_reason"] == "answered"


def test_the_iteration_guard_trips_before_langgraphs_recursion_limit():
    # 1700 rounds take more than LangGraph's default 10,007 steps: the agent's own guard must end the run.
    numbers = itertools.count()
    model = ScriptedChatModel(respond=lambda messages: tool_call("add", {"a": next(numbers), "b": 0}))
    agent = build_agent(model, [add], config=AgentConfig(max_iterations=1700))
    result = agent.invoke({"task": "t"})
    assert (result["finish_reason"], result["iteration"]) == ("max_iterations", 1700)


# bad input is refused before anything is saved ----------------------------------------------------------

BAD_INPUTS = {
    "empty-task": ({"task": ""}, "task: the task is blank"),
    "blank-task": ({"task": "   "}, "task: the task is blank"),
    "no-task": ({}, "task: missing"),
    "number-task": ({"task": 123}, "task: Input should be a valid string"),
    "misspelt-key": ({"tasks": "t"}, "task: missing"),
    "not-a-dict": ("Add 1 and 2.", "Input should be a valid dictionary"),
}


def run_with(how: str, agent, payload):
    if how == "invoke":
        return agent.invoke(payload, THREAD)
    if how == "stream":
        return list(agent.stream(payload, THREAD))
    if how == "batch":
        return agent.batch([payload], [THREAD])
    return asyncio.run(agent.ainvoke(payload, THREAD))


@pytest.mark.parametrize("how", ["invoke", "stream", "batch", "ainvoke"])
@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_input_is_refused_before_anything_is_saved(case, how):
    payload, problem = BAD_INPUTS[case]
    agent, model = make_agent(["2 + 2 = 4"])
    with pytest.raises(InputError, match=problem) as refused:
        run_with(how, agent, payload)
    assert 'Invoke the agent with {"task": "<what it should do>"}' in str(refused.value)
    assert agent.get_state(THREAD).values == {} and list(agent.get_state_history(THREAD)) == []
    assert model.calls == []
    assert agent.invoke({"task": "2 + 2?"}, THREAD)["final_answer"] == "2 + 2 = 4"  # the thread is usable


def test_other_input_keys_are_ignored_as_langgraph_input_schemas_ignore_them():
    agent, _ = make_agent(["2 + 2 = 4"])
    result = agent.invoke({"task": "2 + 2?", "parent_key": [1, 2]}, THREAD)
    assert result["final_answer"] == "2 + 2 = 4" and "parent_key" not in agent.get_state(THREAD).values


def test_a_bad_task_leaves_an_answered_thread_untouched():
    agent, _ = make_agent(["first", "second"], max_iterations=1)
    agent.invoke({"task": "one"}, THREAD)
    before = [snapshot.values for snapshot in agent.get_state_history(THREAD)]
    with pytest.raises(InputError):
        agent.invoke({"task": ""}, THREAD)
    assert [snapshot.values for snapshot in agent.get_state_history(THREAD)] == before
    assert agent.invoke({"task": "two"}, THREAD)["final_answer"] == "second"


def test_the_task_is_cleaned_and_an_agent_input_object_is_accepted():
    agent, _ = make_agent(["ok", "ok again"])
    assert agent.invoke({"task": "lone \ud83d"}, THREAD)["task"] == "lone \ufffd"
    assert agent.invoke(AgentInput(task="as an object"), THREAD)["task"] == "as an object"
    schema = agent.get_input_jsonschema()
    assert schema["required"] == ["task"] and schema["properties"]["task"]["type"] == "string"
