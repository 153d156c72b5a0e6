"""The compiled graph run end to end with the scripted model and a checkpointer: one test per edge."""

import asyncio

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from reinloop import AgentConfig, AgentInput, ConfigurationError, InputError, build_agent
from reinloop.memory import pairing_violations
from reinloop.memory.summary import is_summary_request
from reinloop.testing import ScriptedChatModel, ScriptExhaustedError, json_action, parallel_calls, tool_call
from tests.conftest import THREAD, add, explode, lookup, make_agent, tool_messages


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
