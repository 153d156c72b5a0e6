"""Each node called with a hand-built state: what it returns, and that it never mutates its input."""

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.types import Overwrite

from reinloop.memory.window import CACHED_RESULT_TEMPLATE
from reinloop.nodes import check_finish, circuit_break, compress_memory, decide, execute_tool, observe, validate_args
from reinloop.nodes.check_finish import REPLAN_TEMPLATE
from reinloop.state import CallCheck, ToolOutcome, act, answer, unparsable
from reinloop.testing import ScriptedChatModel, cut_reply, json_action, tool_call
from reinloop.text import truncate
from reinloop.tools import ToolRegistry, accept_any
from tests.conftest import THREAD, add, call, explode, frozen_call, lookup, make_context, rec


def check(name, args, call_id="c1", error_kind=None, error=None):
    return CallCheck(
        call_id=call_id, name=name, args=args, signature=name, key=f"t/1/{call_id}", error_kind=error_kind, error=error
    )


# decide -------------------------------------------------------------------------------------------------


def test_decide_sends_system_task_window_and_correction_and_stores_a_parsed_reply():
    model = ScriptedChatModel(replies=[tool_call("add", {"a": 1, "b": 2})])
    ctx = make_context(model=model, system_prompt="Be brief.")
    window = [HumanMessage("an earlier note", id="n1")]
    state = {"task": "add 1 and 2", "messages": window, "correction": "fix your JSON"}
    update = frozen_call(decide, state, ctx, {})
    sent = model.calls[0].messages
    assert isinstance(sent[0], SystemMessage) and sent[0].content == "Be brief."
    assert sent[1].content == "add 1 and 2"
    assert sent[2].content == "an earlier note"
    assert sent[3].content == "fix your JSON"
    assert [t["function"]["name"] for t in model.calls[0].tools] == ["add", "lookup", "explode"]
    assert update["decision"]["kind"] == "act"
    assert update["messages"][0].tool_calls[0]["args"] == {"a": 1, "b": 2}
    assert update["correction"] is None
    assert "iteration" not in update and "reflection" not in update  # counters untouched mid-run


def test_decide_keeps_an_unparsable_reply_out_of_the_window():
    ctx = make_context(model=ScriptedChatModel(replies=["not json"]), protocol="json")
    update = decide({"task": "t", "messages": []}, ctx, {})
    assert update["decision"] == unparsable("not json", "the reply contains no JSON object")
    assert "messages" not in update


def test_decide_starts_a_new_run_on_a_finished_thread():
    ctx = make_context(model=ScriptedChatModel(replies=["done"]))
    state = {"task": "next task", "messages": [], "finish_reason": "answered", "iteration": 7, "consecutive_errors": 2}
    update = decide(state, ctx, {})
    assert update["iteration"] == 0 and update["consecutive_errors"] == 0
    assert update["finish_reason"] is None and update["iterations_left"] is None


@pytest.mark.parametrize("task", [None, "", "   "], ids=["missing", "empty", "blank"])
def test_decide_without_a_task_is_a_developer_error(task):
    ctx = make_context()
    with pytest.raises(ValueError, match="task"):
        decide({"task": task} if task is not None else {}, ctx, {})


# validate_args -------------------------------------------------------------------------------------------


def test_decide_keeps_a_cut_reply_out_of_the_window_and_counts_its_reported_tokens():
    usage = {"input_tokens": 120, "output_tokens": 1024, "total_tokens": 1144}
    reply = cut_reply(
        tool_call("add", {"a": 1, "b": 2}, content="I add. " * 300).model_copy(update={"usage_metadata": usage})
    )
    ctx = make_context(model=ScriptedChatModel(replies=[reply]))
    update = frozen_call(decide, {"task": "t", "messages": []}, ctx, {})
    assert update["decision"]["kind"] == "unparsable" and "messages" not in update  # the call never enters state
    assert "cut off by the output limit at 1024 tokens" in update["decision"]["error"]
    assert update["usage"]["completion_tokens"] == 1024 and update["last_call"]["source"] == "provider"


def test_a_cut_reply_gets_the_parse_retry_with_a_hint_to_answer_shorter_then_a_note_but_no_error():
    ctx = make_context(
        model=ScriptedChatModel(replies=[cut_reply(json_action("add", {"a": 1, "b": 2}))]), protocol="json"
    )
    decision = decide({"task": "t", "messages": []}, ctx, {})["decision"]
    retry = frozen_call(validate_args, {"decision": decision, "parse_retries": 0}, ctx, THREAD)
    assert retry["parse_retries"] == 1 and "write a shorter reply" in retry["correction"]
    assert retry["checks"] == []  # nothing to run
    spent = validate_args({"decision": decision, "parse_retries": 1}, ctx, THREAD)
    assert spent["correction"] is None and spent["checks"] == []
    update = observe({"decision": decision, "checks": [], "consecutive_errors": 0}, ctx)
    # the model's mistake: its feedback, and no error of the streak
    assert update["consecutive_errors"] == 0 and "cut off by the output limit" in update["messages"][0].content


def test_validate_args_unparsable_with_retry_left_sets_a_correction_hint():
    ctx = make_context(protocol="json")
    update = frozen_call(
        validate_args, {"decision": unparsable("{oops", "invalid JSON"), "parse_retries": 0}, ctx, THREAD
    )
    assert update["parse_retries"] == 1
    hint = update["correction"]
    assert "invalid JSON" in hint and "{oops" in hint and '"action"' in hint  # error, raw reply, expected format
    assert isinstance(update["tool_results"], Overwrite)


def test_validate_args_unparsable_without_retries_gives_up_the_retry():
    ctx = make_context(max_parse_retries=1)
    update = validate_args({"decision": unparsable("x", "bad"), "parse_retries": 1}, ctx, THREAD)
    assert update["correction"] is None and update["parse_retries"] == 0 and update["checks"] == []


def test_validate_args_accepts_valid_calls_and_records_canonical_signatures():
    ctx = make_context()
    state = {"decision": act([call("add", {"b": "2", "a": 1})]), "call_window": [], "parse_retries": 1}
    update = frozen_call(validate_args, state, ctx, THREAD)
    (checked,) = update["checks"]
    assert checked["error_kind"] is None
    # coerced and sorted: the same call however the model spells it
    assert checked["signature"] == 'add{"a": 1, "b": 2}'
    assert "call_window" not in update  # observe records what became of the call
    assert update["parse_retries"] == 0


@pytest.mark.parametrize(
    ("name", "args", "kind", "mentions"),
    [
        ("divide", {"a": 1}, "unknown_tool", ["'divide' is not a valid tool", "[add, lookup, explode]"]),
        ("add_tool", {"a": 1}, "unknown_tool", ["'add_tool' is not a valid tool. Did you mean 'add'?"]),
        ("lokup", {"key": "k"}, "unknown_tool", ["'lokup' is not a valid tool. Did you mean 'lookup'?"]),
        ("add", {"a": "one", "b": 2}, "invalid_args", ["a: Input should be a valid integer", "'one'"]),
        ("add", {"a": 1}, "invalid_args", ["b: missing (required)", "Expected add(a: integer, b: integer)."]),
        ("add", {"a": 1, "b": 2, "c": 3}, "invalid_args", ["c: unexpected argument", "['a', 'b']"]),
        ("add", {"a": "x" * 500, "b": 2}, "invalid_args", ["(got 'xxxx", "x … [422 more characters cut])"]),
    ],
    ids=[
        "unknown-tool",
        "unknown-tool-with-a-suffix",
        "unknown-tool-misspelt",
        "wrong-type",
        "missing-field",
        "extra-field",
        "long-input-quoted-cut",
    ],
)
def test_validate_args_rejects_bad_calls_with_actionable_feedback(name, args, kind, mentions):
    ctx = make_context()
    update = validate_args({"decision": act([call(name, args)]), "call_window": []}, ctx, THREAD)
    (checked,) = update["checks"]
    assert checked["error_kind"] == kind
    for text in mentions:
        assert text in checked["error"]


def test_validate_args_lets_schemas_that_allow_extra_arguments_have_them():
    from langchain_core.tools import StructuredTool
    from pydantic import BaseModel, ConfigDict

    class Options(BaseModel):
        model_config = ConfigDict(extra="allow")
        query: str

    search = StructuredTool.from_function(
        lambda query, **kw: query, name="search", description="Search.", args_schema=Options
    )
    update = validate_args(
        {"decision": act([call("search", {"query": "x", "lang": "en"})])}, make_context([search]), THREAD
    )
    assert update["checks"][0]["error_kind"] is None


def test_validate_args_final_answer_has_no_checks():
    update = validate_args({"decision": answer("42")}, make_context(), THREAD)
    assert update["checks"] == [] and update["correction"] is None


# execute_tool --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_name", "args", "kind", "content"),
    [
        ("add", {"a": 2, "b": 3}, None, "5"),
        ("lookup", {"key": "missing"}, "tool_error", "unknown key 'missing'"),
        ("explode", {"reason": "x"}, "tool_error", "ZeroDivisionError: division by zero"),
        ("lookup", {"key": "empty"}, "empty_result", "returned empty text"),
    ],
    ids=["success", "tool-exception", "crash", "pseudo-success"],
)
def test_execute_tool_outcomes(tool_name, args, kind, content):
    update = execute_tool(check(tool_name, args), make_context(), {})
    (outcome,) = update["tool_results"]
    assert outcome["error_kind"] == kind and outcome["call_id"] == "c1"
    assert content in outcome["content"]


def test_execute_tool_times_out_a_hung_sync_tool(gate):
    ctx = make_context(tools=[gate.tool], tool_timeout_s=0.2)
    (outcome,) = execute_tool(check("hang", {"seconds": 100}), ctx, {})["tool_results"]
    assert outcome["error_kind"] == "timeout" and "within 0.2 s" in outcome["content"]


def test_execute_tool_uses_the_tools_own_result_check():
    registry = ToolRegistry()
    registry.add(lookup, check_result=accept_any)
    ctx = make_context(tools=registry)
    (outcome,) = execute_tool(check("lookup", {"key": "empty"}), ctx, {})["tool_results"]
    assert outcome["error_kind"] is None and outcome["content"] == ""


# observe -------------------------------------------------------------------------------------------------


def test_observe_answers_every_call_in_order_and_counts_errors():
    checks = [
        check("add", {}, "c1"),
        check("nope", {}, "c2", "unknown_tool", "Error: unknown"),
        check("lookup", {}, "c3"),
    ]
    results = [
        ToolOutcome(call_id="c3", name="lookup", content="Error: failed", error_kind="tool_error"),
        ToolOutcome(call_id="c1", name="add", content="3", error_kind=None),
    ]
    state = {"decision": act([]), "checks": checks, "tool_results": results, "consecutive_errors": 1}
    update = frozen_call(observe, state, make_context())
    messages = update["messages"]
    assert [m.tool_call_id for m in messages] == ["c1", "c2", "c3"]
    assert [m.status for m in messages] == ["success", "error", "error"]
    assert [m.content for m in messages] == ["3", "Error: unknown", "Error: failed"]
    # success reset 1 -> 0, then the tool's error; the unknown tool is the model's mistake, not counted
    assert update["consecutive_errors"] == 1


def test_observe_sends_answers_from_cache_and_refusals_and_records_what_became_of_each_call():
    checks = [
        {**check("add", {}, "c1"), "cached": "4"},
        check("add", {}, "c2", "repeated_call", "Error: not run"),
        check("lookup", {}, "c3"),
        check("explode", {}, "c4"),
    ]
    results = [
        ToolOutcome(call_id="c3", name="lookup", content="Paris", error_kind=None),
        ToolOutcome(call_id="c4", name="explode", content="Error: boom", error_kind="tool_error"),
    ]
    earlier = [[rec("ok", "x", signature=f"s{n}")] for n in range(3)]
    state = {"decision": act([]), "checks": checks, "tool_results": results, "call_window": earlier}
    update = frozen_call(observe, state, make_context(loop_window=2, repeats_after_feedback=1, repeats_after_cache=0))
    assert [(m.content, m.status) for m in update["messages"]] == [
        (CACHED_RESULT_TEMPLATE.format(result="4"), "success"),
        ("Error: not run", "error"),
        ("Paris", "success"),
        ("Error: boom", "error"),
    ]
    assert CACHED_RESULT_TEMPLATE.format(result="4").endswith("\n4")
    # the last loop_window + max(repeats_after_feedback, repeats_after_cache) decisions
    assert update["call_window"] == [
        *earlier[-2:],
        [
            rec("cached", "4", "add", name="add"),
            rec("refused", None, "add", name="add"),
            rec("ok", "Paris", "lookup", name="lookup"),
            rec("failed", None, "explode", name="explode"),
        ],
    ]
    # an answer from cache is neither an error nor a real success: the streak is left as it was
    state = {"decision": act([]), "checks": checks[:1], "tool_results": [], "consecutive_errors": 2}
    assert observe(state, make_context())["consecutive_errors"] == 2


def test_observe_sends_outcomes_as_execute_tool_stored_them():
    # execute_tool cut the tool's output where it was stored; a second cut here would differ from the record.
    long = "y" * 2_000
    state = {
        "decision": act([]),
        "checks": [check("add", {})],
        "tool_results": [ToolOutcome(call_id="c1", name="add", content=long, error_kind=None)],
    }
    (message,) = observe(state, make_context(observation_max_chars=100))["messages"]
    assert message.content == long


def test_observe_reports_an_exhausted_parse_failure_as_a_note():
    state = {"decision": unparsable("x", "no JSON object"), "checks": [], "consecutive_errors": 0}
    update = observe({**state, "consecutive_errors": 2, "streak_errors": ["a(): boom", "b(): boom"]}, make_context())
    (note,) = update["messages"]
    assert isinstance(note, HumanMessage) and "no JSON object" in note.content
    # the model's mistake leaves the streak as it was
    assert (update["consecutive_errors"], update["streak_errors"]) == (2, ["a(): boom", "b(): boom"])


def test_observe_keeps_one_line_per_error_of_the_streak_and_clears_it_with_a_real_success():
    def failed(args, call_id, error):
        return ToolOutcome(call_id=call_id, name="lookup", content=error, error_kind="tool_error")

    def observed(calls, **state):
        checks = [check("lookup", args, call_id) for args, call_id, _ in calls]
        results = [failed(*call) for call in calls]
        return frozen_call(observe, {"decision": act([]), "checks": checks, "tool_results": results, **state}, ctx)

    ctx = make_context(error_threshold=2)
    calls = [({"n": n}, f"c{n}", f"Error: unknown\n key {n}") for n in range(3)]
    update = observed(calls, streak_errors=["older"], reflected_at=None)
    # the last error_threshold lines, each on one line
    assert update["streak_errors"] == [
        'lookup({"n": 1}): Error: unknown key 1',
        'lookup({"n": 2}): Error: unknown key 2',
    ]
    (line,) = observed([({"a": "x" * 500}, "c9", "Error: bad")])["streak_errors"]
    assert len(line) < 250 and line.endswith("more characters cut]")
    # a long error is cut once, with the whole line: the marker counts every character left out
    (line,) = observed([({"a": 1}, "c8", "Error: " + "z" * 300 + ". Advice.")])["streak_errors"]
    whole = 'lookup({"a": 1}): Error: ' + "z" * 300 + "."
    assert line == truncate(whole, 100) and line.count("more characters cut") == 1
    # a real success clears the streak; an error after it in the same round starts a new one
    ran = [check("add", {}, "c1"), check("lookup", {"n": 0}, "c0")]
    results = [ToolOutcome(call_id="c1", name="add", content="3", error_kind=None), failed(*calls[0])]
    state = {"decision": act([]), "checks": ran, "tool_results": results, "streak_errors": ["a", "b", "c"]}
    update = observe({**state, "consecutive_errors": 3, "reflected_at": 3}, make_context())
    assert (update["consecutive_errors"], update["reflected_at"]) == (1, None)
    assert update["streak_errors"] == ['lookup({"n": 0}): Error: unknown key 0']


def test_observe_refuses_a_validated_call_without_an_outcome():
    state = {"decision": act([]), "checks": [check("add", {})], "tool_results": []}
    with pytest.raises(RuntimeError, match="no outcome"):
        observe(state, make_context())


# compress_memory -----------------------------------------------------------------------------------------


def entries(count, result=lambda i: f"r{i}"):
    messages = []
    for i in range(count):
        messages.append(
            AIMessage("", id=f"a{i}", tool_calls=[call("add", {"i": i}, f"c{i}a"), call("add", {}, f"c{i}b")])
        )
        messages.append(ToolMessage(result(i), tool_call_id=f"c{i}a", id=f"t{i}a"))
        messages.append(ToolMessage("same", tool_call_id=f"c{i}b", id=f"t{i}b"))
    return messages


def test_compress_memory_leaves_the_window_alone_until_it_is_over_capacity():
    # Between compactions the window only grows: the prompt's history is the previous one plus the new messages.
    for count in range(1, 5):
        assert compress_memory({"task": "t", "messages": entries(count)}, make_context(memory_capacity=4), {}) == {}


def test_a_full_window_s_compaction_folds_its_oldest_compress_every_whole_entries_at_once():
    state = {"task": "t", "messages": entries(5), "recalled": ["an old fact"]}
    update = frozen_call(compress_memory, state, make_context(memory_capacity=4, compress_every=2), {})
    assert all(isinstance(m, RemoveMessage) for m in update["messages"])
    assert [m.id for m in update["messages"]] == ["a0", "t0a", "t0b", "a1", "t1a", "t1b"]
    # One summary of the two entries (the extractive one: no summarizer), nothing left pending, and the memory
    # note's recall cleared, for decide to redo with the new note.
    (summary,) = update["summaries"]
    assert all(f'add({{"i": {i}}}) -> r{i}' in summary for i in range(2)) and '"i": 2' not in summary
    assert (update["pending"], update["folds"], update["recalled"]) == ([], 1, None)


def test_compress_memory_keeps_only_the_newest_of_repeated_calls_with_no_digest_of_the_rest():
    repeated = [AIMessage("", id=f"a{i}", tool_calls=[call("add", {"a": 1, "b": 2}, f"c{i}")]) for i in range(3)]
    messages = [
        m for i, head in enumerate(repeated) for m in (head, ToolMessage("3", tool_call_id=f"c{i}", id=f"t{i}"))
    ]
    update = frozen_call(compress_memory, {"task": "t", "messages": messages}, make_context(memory_capacity=10), {})
    assert [m.id for m in update["messages"]] == ["a1", "t1", "a0", "t0"]
    assert "pending" not in update  # the newer copy in the window says the same


def test_compress_memory_folds_digests_with_the_summarizer():
    summarizer = ScriptedChatModel(replies=[AIMessage("Added numbers 0 to 2.", usage_metadata={
        "input_tokens": 50, "output_tokens": 6, "total_tokens": 56})])  # fmt: skip
    ctx = make_context(memory_capacity=1, compress_every=3, summarizer=summarizer)
    state = {"task": "sum things", "messages": entries(4), "summaries": ["older"], "folds": 4}
    update = compress_memory(state, ctx, {})
    assert update["summaries"] == ["older", "Added numbers 0 to 2."]
    assert update["folds"] == 5 and update.get("pending", []) == []
    assert update["last_call"]["source"] == "provider" and update["usage"]["total_tokens"] == 56
    sent = summarizer.calls[0].messages[1].content
    assert "sum things" in sent and 'add({"i": 2}) -> r2' in sent


def test_compress_memory_survives_a_failing_summarizer():
    ctx = make_context(
        memory_capacity=1, compress_every=2, summarizer=ScriptedChatModel(replies=[ConnectionError("down")])
    )
    update = compress_memory({"task": "t", "messages": entries(3)}, ctx, {})
    (summary,) = update["summaries"]
    assert summary == '- add({"i": 0}) -> r0; add({}) -> same\n- add({"i": 1}) -> r1; add({}) -> same'
    assert "usage" not in update


# check_finish --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"decision": answer("42"), "iteration": 19}, "answered"),
        ({"decision": act([]), "checks": [check("add", {}, error_kind="repeat_after_feedback")]}, "dead_loop"),
        ({"decision": act([]), "checks": [check("add", {}, error_kind="repeated_call")]}, None),
        ({"decision": act([]), "checks": [], "consecutive_errors": 3, "reflected_at": 2}, "error_streak"),
        ({"decision": act([]), "checks": [], "consecutive_errors": 3}, None),
        ({"decision": act([]), "checks": [], "consecutive_errors": 3, "reflected_at": 3}, None),
        ({"decision": act([]), "checks": [], "iteration": 19, "iterations_left": 1}, "max_iterations"),
        ({"decision": act([]), "checks": [], "iteration": 0}, None),
        ({"decision": act([]), "checks": [], "iteration": 5, "iterations_left": 1}, "max_iterations"),
        ({"decision": act([]), "checks": [], "iteration": 5, "consecutive_errors": 2}, None),
        ({"decision": act([]), "checks": [], "iteration": 30, "iterations_left": 4}, None),
    ],
    ids=[
        "answer-wins-on-last-round",
        "dead-loop",
        "refused-repeat-goes-on",
        "error-streak-after-the-reflection-turn",
        "error-streak-reaches-the-limit-reflection-turn",
        "no-new-error-after-the-reflection-turn",
        "max-iterations",
        "first-round",
        "resumed-budget-spent",
        "go-on",
        "resumed-budget-left",
    ],
)
def test_check_finish(state, reason):
    update = frozen_call(check_finish, state, make_context(max_iterations=20, error_threshold=3, max_replans=0))
    left = state.get("iterations_left")
    assert update.get("iterations_left", 0) == (20 if left is None else left) - 1 or reason == "answered"
    assert update["finish_reason"] == reason
    assert update["iteration"] == state.get("iteration", 0) + 1
    if reason == "answered":
        assert update["final_answer"] == "42"


def test_check_finish_grants_a_re_plan_turn_in_place_of_an_error_streak_or_a_dead_loop_while_any_are_left():
    lines = ["a(1): boom", "b(): no"]
    window = [[{"name": "a"}]]
    state = {
        "decision": act([]),
        "checks": [],
        "consecutive_errors": 4,
        "reflected_at": 3,
        "streak_errors": lines,
        "call_window": window,
    }
    update = frozen_call(check_finish, state, make_context(error_threshold=3, max_replans=2))
    assert update["finish_reason"] is None and update["replans"] == 1
    assert update["reflection"] == REPLAN_TEMPLATE.format(
        replan=1,
        replans=2,
        what="your attempts keep failing:",
        errors="- a(1): boom\n- b(): no",
        left="1 more re-plan is left.",
    )
    # the guards keep what they know: the streak and the repeat guards' record stay as they were
    assert not {"consecutive_errors", "streak_errors", "reflected_at", "call_window", "stalled"} & set(update)
    # the last one says the run stops next time; with none left the breaker ends the run
    update = check_finish({**state, "replans": 1}, make_context(error_threshold=3, max_replans=2))
    assert update["reflection"].endswith("If this goes on, the run stops.") and update["replans"] == 2
    update = check_finish({**state, "replans": 2}, make_context(error_threshold=3, max_replans=2))
    assert (update["finish_reason"], "reflection" in update) == ("error_streak", False)
    # a dead loop: the refused call is what it lists
    refused = {
        "name": "a",
        "args": {},
        "error": "Error: not run. This exact 'a' call ...",
        "error_kind": "repeat_after_feedback",
    }
    looping = {"decision": act([]), "checks": [refused], "consecutive_errors": 0}
    update = check_finish(looping, make_context(max_replans=1))
    assert update["finish_reason"] is None and update["reflection"].startswith(
        "Re-plan (1 of 1): you keep making calls"
    )
    assert "- a({}): Error: not run." in update["reflection"]
    assert check_finish({**looping, "replans": 1}, make_context(max_replans=1))["finish_reason"] == "dead_loop"
    # a breaker further down the table still ends the run: no re-plan on the last round
    update = check_finish({**state, "iterations_left": 1}, make_context(error_threshold=3))
    assert (update["finish_reason"], "reflection" in update) == ("max_iterations", False)


def test_decide_ends_the_prompt_with_the_reflection_and_clears_it_once_a_reply_parses():
    model = ScriptedChatModel(replies=["not json", json_action("add", {"a": 1, "b": 1})])
    ctx = make_context(model=model, protocol="json")
    state = {"task": "t", "messages": [], "reflection": "Your last 3 attempts failed", "correction": "fix it"}
    update = frozen_call(decide, state, ctx, {})
    assert [m.content for m in model.calls[0].messages[-2:]] == ["Your last 3 attempts failed", "fix it"]
    assert "reflection" not in update  # unparsable: the retry still shows it
    update = decide({**state, "correction": None}, ctx, {})
    assert model.calls[1].messages[-1].content == "Your last 3 attempts failed"
    assert update["reflection"] is None


# circuit_break -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "mentions"),
    [
        ("max_iterations", "no final answer after 4 rounds"),
        ("error_streak", 'The last one: add({"a": 2}): Error: boom'),
        (
            "dead_loop",
            "The same call kept coming after being refused more than 5 times, or answered from cache more than "
            '5 times, within 8 decisions: add({"a": 1})',
        ),
    ],
    ids=["max-iterations", "error-streak", "dead-loop"],
)
def test_circuit_break_explains_the_reason_and_how_to_resume(reason, mentions):
    state = {
        "finish_reason": reason,
        "iteration": 4,
        "iterations_left": 0,
        "consecutive_errors": 3,
        "reflected_at": 2,
        "streak_errors": ['add({"a": 2}): Error: boom'],
        "messages": [ToolMessage("Error: boom", tool_call_id="c1", status="error")],
        "checks": [check("add", {"a": 1}, error_kind="repeat_after_feedback", error="x")],
    }
    update = frozen_call(circuit_break, {**state, "reflection": "pending"}, make_context())
    (message,) = update["messages"]
    assert mentions in message.content and "reinloop.resume" in message.content
    assert update["reflection"] is None  # a turn the run did not take is not for the next run


def test_nodes_take_only_tools_from_their_context():
    # a registry can be passed where tools are expected
    ctx = make_context(tools=ToolRegistry([add, explode]))
    assert ctx.registry.names == ["add", "explode"]


@pytest.mark.parametrize(
    ("protocol", "system_prompt", "expected"),
    [
        ("tool_calling", None, None),
        ("tool_calling", "Be brief.", "Be brief."),
        ("json", None, "Reply with exactly one JSON object"),
        ("json", "Be brief.", "Be brief.\n\nReply with exactly one JSON object"),
    ],
)
def test_the_system_message_holds_only_what_is_configured_and_the_protocol_format(protocol, system_prompt, expected):
    model = ScriptedChatModel(replies=['{"action": "final_answer", "action_input": "3"}'])
    ctx = make_context(model=model, protocol=protocol, system_prompt=system_prompt)
    frozen_call(decide, {"task": "add 1 and 2", "messages": []}, ctx, {})
    sent = model.calls[0].messages
    systems = [message for message in sent if isinstance(message, SystemMessage)]
    if expected is None:
        assert systems == [] and sent[0].content == "add 1 and 2"
    else:
        assert len(systems) == 1 and sent[0] is systems[0] and systems[0].text.startswith(expected)
