"""The evaluation: its tasks are solvable, its runs repeat exactly per seed, reinloop keeps its budgets."""

import json
import tempfile
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from reinloop import AgentConfig
from reinloop_eval import AGENTS, BUDGET, SUITE, FaultProfile, evaluate_suite, write_report
from reinloop_eval.tasks import holds

NO_FAULTS = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0)


def without_time(records):
    """The records without the real time they took, the one figure that may differ between reruns."""
    return [{**vars(record), "wall_s": None} for record in records]


def test_the_suite_has_fifty_distinct_tasks_over_the_toolset():
    assert len(SUITE) == 50 and len({task.id for task in SUITE}) == 50
    tools = {step.tool for task in SUITE for step in task.plan}
    assert {"web_search", "calculator", "translate", "file_write", "file_read", "timer", "db_insert"} <= tools


def test_every_task_is_solved_by_its_plan_without_faults():
    records = evaluate_suite(profile=NO_FAULTS, agents=("reinloop", "naive loop"))
    failed = [(record.agent, record.task) for record in records if not record.success]
    assert failed == []
    assert [record for record in records if record.wasted_tool_calls or record.exceeded_budget] == []


def test_a_wrong_answer_fails_the_check(tmp_path):
    task = next(task for task in SUITE if task.expect)
    assert task.check(tmp_path, task.answer)
    assert not task.check(tmp_path, "I do not know.")
    assert not task.check(tmp_path, None)


def test_a_run_is_the_same_every_time_for_a_seed():
    profile = FaultProfile(fault_rate=0.5, tool_fault_rate=0.3)  # slow calls outlast reinloop's timeout
    first = evaluate_suite(profile=profile, seed=7, tasks=12)
    again = evaluate_suite(profile=profile, seed=7, tasks=12)
    other = evaluate_suite(profile=profile, seed=8, tasks=12)
    assert without_time(first) == without_time(again)
    assert without_time(first) != without_time(other)


@pytest.mark.parametrize("fault_rate", [0.3, 0.8], ids=["some-faults", "mostly-faults"])
def test_reinloop_never_crashes_and_never_exceeds_its_budget(fault_rate):
    profile = FaultProfile(fault_rate=fault_rate, correct_rate=0.3, tool_fault_rate=0.3)
    records = evaluate_suite(profile=profile, seed=1, agents=("reinloop",))
    assert not [record for record in records if record.crashed]
    # rounds hold the budget; an unreadable reply is asked for again within its round (max_parse_retries)
    assert max(record.rounds for record in records) <= BUDGET
    assert not [record for record in records if record.exceeded_budget]
    assert max(record.decisions for record in records) <= BUDGET * (1 + AgentConfig().max_parse_retries)


def test_a_runaway_is_recorded_over_budget_for_the_agents_the_evaluation_must_stop_never_raised():
    from reinloop_eval.agents import FAIR_PEER, REINLOOP_AGENTS

    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, runaway_rate=1.0)
    records = {record.agent: record for record in evaluate_suite(profile=profile, tasks=1)}  # calc-01: one step
    assert {agent: record.finish for agent, record in records.items()} == {
        "naive loop": "cap",
        "create_agent": "recursion_limit",
        "create_agent + middleware": "call_limit",  # its model call limit ends the run with a note, no answer
        "create_agent + middleware + re-ask": "call_limit",
        FAIR_PEER: "call_limit",
        **dict.fromkeys(REINLOOP_AGENTS, "max_iterations"),  # every ablation keeps the iteration budget
    }
    assert not any(record.crashed for record in records.values())
    assert {agent: record.exceeded_budget for agent, record in records.items()} == {
        "naive loop": True,
        "create_agent": True,
        "create_agent + middleware": False,
        "create_agent + middleware + re-ask": False,
        FAIR_PEER: False,
        **dict.fromkeys(REINLOOP_AGENTS, False),
    }
    assert records["create_agent"].rounds > BUDGET >= records["reinloop"].rounds
    assert all(record.wasted_tool_calls == record.tool_calls - 1 > 0 for record in records.values())


def test_wasted_tool_calls_are_executions_but_the_successful_ones_up_to_the_plan():
    from reinloop_eval.simulated import ToolStats

    stats = ToolStats()
    stats.executed, stats.succeeded = 5, 3
    assert (stats.wasted(1), stats.wasted(3), stats.wasted(4)) == (4, 2, 2)


def test_the_report_shows_every_agent_and_each_paired_with_reinloop(tmp_path):
    profile = FaultProfile()
    records = evaluate_suite(profile=profile, seed=0, tasks=5)
    summary = write_report(records, profile, 0, tmp_path)
    assert list(summary) == list(AGENTS)
    text = (tmp_path / "report.md").read_text()
    assert all(f"| {agent} |" in text for agent in AGENTS) and "## Fault model" in text
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["settings"]["seed"] == 0 and len(data["runs"]) == 5 * len(AGENTS)
    assert list(data["paired"]) == [agent for agent in AGENTS if agent != "reinloop"]
    assert "## Paired with reinloop" in text and all(f"| {agent} | 5 |" in text for agent in data["paired"])
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"


def test_the_simulated_model_knows_a_summary_request_by_its_instance_not_by_its_wording():
    from langchain_core.messages import HumanMessage, SystemMessage

    from reinloop.memory.summary import SUMMARY_PROMPT
    from reinloop_eval.simulated import SimulatedModel, summarizer_of

    task = SUITE[0]
    model = SimulatedModel(task=task, profile=NO_FAULTS)
    summarizer = summarizer_of(model)
    reworded = [SystemMessage("Condense these steps, please."), HumanMessage("- step one")]
    assert summarizer.invoke(reworded).text.startswith("Summary:")
    assert summarizer.decisions == 0
    as_worded = [SystemMessage(SUMMARY_PROMPT.format(words=40)), HumanMessage(task.prompt)]
    assert model.invoke(as_worded).tool_calls  # the deciding model decides, whatever it is sent
    assert model.decisions == 1
    assert summarizer_of(summarizer) is summarizer


# the runaway and stubborn-loop faults ---------------------------------------------------------------------


def task_named(task_id):
    return next(task for task in SUITE if task.id == task_id)


def observe(messages, reply, result):
    """The conversation after `reply` (one tool call) ran and returned `result`."""
    call = reply.tool_calls[0]
    return [*messages, reply, ToolMessage(result, tool_call_id=call["id"], name=call["name"])]


def solved(task):
    """The conversation after the task's plan ran, each step successfully: the answer is known."""
    messages = [HumanMessage(task.prompt)]
    for number, step in enumerate(task.plan):
        call = {"name": step.tool, "args": step.args, "id": f"call-{number}", "type": "tool_call"}
        reply = AIMessage("", tool_calls=[call])
        messages = observe(messages, reply, "ok")
    return messages


def test_the_new_faults_are_off_by_default():
    from reinloop_eval.simulated import EXTRA_FAULTS

    profile = FaultProfile()
    assert (profile.runaway_rate, profile.stubborn_rate, profile.runaway_rounds) == (0.0, 0.0, None)
    assert profile.extra_rates() == tuple((fault, 0.0) for fault in EXTRA_FAULTS)


def test_a_runaway_model_keeps_calling_tools_with_new_valid_arguments_instead_of_answering(tmp_path):
    from reinloop.tools.toolset import default_toolset
    from reinloop_eval.simulated import SimulatedModel

    task = task_named("calc-01")
    tools = {tool.name: tool for tool in default_toolset(tmp_path)}
    model = SimulatedModel(task=task, profile=FaultProfile(fault_rate=0.0, runaway_rate=1.0))
    messages, seen = solved(task), []
    for _ in range(30):
        reply = model.invoke(messages)
        assert not reply.text and len(reply.tool_calls) == 1, reply
        call = reply.tool_calls[0]
        result = tools[call["name"]].invoke(call["args"])  # valid: the tool runs it
        assert result not in ("", "[]", [])
        seen.append((call["name"], json.dumps(call["args"], sort_keys=True)))
        messages = observe(messages, reply, str(result))
    assert len(set(seen)) == 30  # never the same call twice
    assert {name for name, _ in seen} == {"web_search", "calculator"}


def test_a_wide_runaway_makes_that_many_new_calls_each_decision(tmp_path):
    from reinloop_eval.simulated import SimulatedModel

    task = task_named("calc-01")
    model = SimulatedModel(task=task, profile=FaultProfile(fault_rate=0.0, runaway_rate=1.0, runaway_width=5))
    messages, seen = solved(task), []
    for _ in range(4):
        reply = model.invoke(messages)
        assert not reply.text and len(reply.tool_calls) == 5, reply
        assert len({call["id"] for call in reply.tool_calls}) == 5
        seen += [(call["name"], json.dumps(call["args"], sort_keys=True)) for call in reply.tool_calls]
        for call in reply.tool_calls:
            messages = observe(messages, AIMessage("", tool_calls=[call]), "ok")
    assert len(set(seen)) == 20  # never the same call twice, within a decision or across them


def test_a_bounded_runaway_answers_after_its_rounds():
    from reinloop_eval.simulated import SimulatedModel

    task = task_named("calc-01")
    model = SimulatedModel(task=task, profile=FaultProfile(fault_rate=0.0, runaway_rate=1.0, runaway_rounds=3))
    messages = solved(task)
    for _ in range(3):
        reply = model.invoke(messages)
        assert reply.tool_calls
        messages = observe(messages, reply, "ok")
    assert model.invoke(messages).text == task.answer


def test_without_a_runaway_the_model_answers():
    from reinloop_eval.simulated import SimulatedModel

    task = task_named("calc-01")
    assert SimulatedModel(task=task, profile=NO_FAULTS).invoke(solved(task)).text == task.answer


@pytest.mark.parametrize("correct_rate, repeats", [(0.0, 6), (1.0, 1)], ids=["never-corrects", "corrects-at-once"])
def test_a_stubborn_model_repeats_a_successful_call_until_it_corrects_itself(correct_rate, repeats):
    from reinloop_eval.simulated import SimulatedModel

    task = task_named("search-calc-01")  # web_search, then calculator
    profile = FaultProfile(fault_rate=0.0, stubborn_rate=1.0, correct_rate=correct_rate)
    model = SimulatedModel(task=task, profile=profile)
    first = model.invoke([HumanMessage(task.prompt)])
    messages = observe([HumanMessage(task.prompt)], first, "found it")
    calls = []
    for _ in range(6):
        reply = model.invoke(messages)
        calls.append((reply.tool_calls[0]["name"], reply.tool_calls[0]["args"]))
        if calls[-1][0] != "web_search":
            break
        messages = observe(messages, reply, "found it")
    assert calls[:repeats] == [(first.tool_calls[0]["name"], first.tool_calls[0]["args"])] * repeats
    assert len(calls) == repeats + (correct_rate == 1.0)
    if correct_rate == 1.0:
        assert calls[-1][0] == "calculator"


# the fault and recovery model: one contract for every agent ------------------------------------------------

NOTE = "Your last attempts failed: ... Take a different approach."
NOTE_KINDS = {
    "none": lambda: [],
    "human": lambda: [HumanMessage(NOTE)],
    "system": lambda: [SystemMessage(NOTE)],
    "ai": lambda: [AIMessage(NOTE)],
}
BOGUS = {"bogus": 1}  # not the plan's arguments
REPEATED_CALL = ("call", SUITE[0].plan[0].tool, json.dumps(BOGUS))


def failed_call(task, result="Error: boom", status="error"):
    call = {"name": task.plan[0].tool, "args": BOGUS, "id": "c1", "type": "tool_call"}
    return [
        HumanMessage(task.prompt),
        AIMessage("", tool_calls=[call]),
        ToolMessage(result, tool_call_id="c1", status=status),
    ]


def malformed_reply(task):
    bad = {"type": "invalid_tool_call", "id": "m1", "name": task.plan[0].tool, "args": '{"expr', "error": None}
    return [HumanMessage(task.prompt), AIMessage("", invalid_tool_calls=[bad])]


# The tests of what the model reads as its outcome hold whatever the feedback names: correct_rate alone gates a
# fix here (tests/eval/test_recovery_model.py has the rule that weighs the feedback).
IGNORES_FEEDBACK = {"unnamed_fix_factor": 1.0}


def model_for(task, correct_rate, **faults):
    from reinloop_eval.simulated import SimulatedModel

    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=correct_rate, **IGNORES_FEEDBACK, **faults)
    return SimulatedModel(task=task, profile=profile, seed=11)


def plan_step(task):
    return ("call", task.plan[0].tool, json.dumps(task.plan[0].args, sort_keys=True))


@pytest.mark.parametrize("kind", list(NOTE_KINDS))
@pytest.mark.parametrize(
    "outcome, repeated",
    [
        (failed_call, ("call", SUITE[0].plan[0].tool, json.dumps(BOGUS))),
        (
            lambda task: failed_call(task, result="", status="success"),
            ("call", SUITE[0].plan[0].tool, json.dumps(BOGUS)),
        ),
        (malformed_reply, ("malformed", SUITE[0].plan[0].tool)),
        (
            lambda task: [
                *malformed_reply(task),
                ToolMessage("Error: invalid call", tool_call_id="m1", status="error"),
            ],
            ("malformed", SUITE[0].plan[0].tool),
        ),
    ],
    ids=["error-observation", "empty-result", "malformed-kept", "malformed-answered-by-a-tool-note"],
)
def test_the_model_reacts_to_its_last_actions_failure_the_same_whatever_message_kind_carries_a_note(
    outcome, repeated, kind
):
    task = SUITE[0]
    sent = outcome(task) + NOTE_KINDS[kind]()
    assert signature(model_for(task, correct_rate=0.0).invoke(sent)) == repeated  # repeats the failed action
    assert signature(model_for(task, correct_rate=1.0).invoke(sent)) == plan_step(task)  # corrects itself


def first_decision_malformed_seed(task):
    from reinloop_eval.simulated import decision_draws

    # the first decision's faults are malformed, bad_args and unknown_tool: malformed is the first third
    return next(seed for seed in range(1000) if decision_draws(seed, 1).which < 1 / 3)


@pytest.mark.parametrize("kind", list(NOTE_KINDS))
@pytest.mark.parametrize("correct_rate", [0.0, 1.0])
def test_a_reask_after_a_dropped_malformed_reply_is_gated_by_the_correct_rate(kind, correct_rate):
    from reinloop_eval.simulated import SimulatedModel

    task = SUITE[0]
    model = SimulatedModel(task=task, profile=FaultProfile(fault_rate=1.0), seed=first_decision_malformed_seed(task))
    first = model.invoke([HumanMessage(task.prompt)])
    assert signature(first) == ("malformed", task.plan[0].tool)
    # the agent drops the reply and asks again, with or without a note: the draw is not a fresh one
    model.profile = FaultProfile(fault_rate=0.0, correct_rate=correct_rate, **IGNORES_FEEDBACK)
    again = model.invoke([HumanMessage(task.prompt), *NOTE_KINDS[kind]()])
    kept = model_for(task, correct_rate).invoke(malformed_reply(task) + NOTE_KINDS[kind]())
    assert signature(again) == signature(kept)  # dropped or kept, the same reaction
    assert signature(again) == (("malformed", task.plan[0].tool) if correct_rate == 0.0 else plan_step(task))


@pytest.mark.parametrize("kind", list(NOTE_KINDS))
def test_a_success_followed_by_a_note_of_any_kind_is_still_a_success(kind):
    task = task_named("search-calc-01")  # web_search, then calculator
    step = task.plan[0]
    call = {"name": step.tool, "args": step.args, "id": "s1", "type": "tool_call"}
    sent = [HumanMessage(task.prompt), AIMessage("", tool_calls=[call]), ToolMessage("found it", tool_call_id="s1")]
    sent += NOTE_KINDS[kind]()
    moves_on = model_for(task, correct_rate=0.0).invoke(sent)
    assert moves_on.tool_calls[0]["name"] == task.plan[1].tool
    stubborn = model_for(task, correct_rate=0.0, stubborn_rate=1.0).invoke(sent)  # a success starts a loop
    assert signature(stubborn) == ("call", step.tool, json.dumps(step.args, sort_keys=True))


# the faults with their own rates ------------------------------------------------------------------------


def first_then_clean(task, correct_rate, **rates):
    """A model whose first decision makes the fault `rates` says, and whose later ones make none."""
    model = model_for(task, correct_rate, **rates)
    first = model.invoke([HumanMessage(task.prompt)])
    model.profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=correct_rate)
    return model, first


@pytest.mark.parametrize("kind", list(NOTE_KINDS))
@pytest.mark.parametrize("rate", ["text_call_rate", "empty_rate"])
def test_an_unread_reply_fails_and_is_repeated_or_corrected_by_the_correct_rate(rate, kind):
    task = SUITE[0]
    for correct_rate, expected in ((0.0, "again"), (1.0, "plan")):
        model, first = first_then_clean(task, correct_rate, **{rate: 1.0})
        assert not first.tool_calls and not first.invalid_tool_calls
        if rate == "text_call_rate":
            step = task.plan[0]
            assert json.loads(first.text) == {"name": step.tool, "arguments": step.args}
        else:
            assert first.text == ""
        # the agent did not read it (the run went on without it, or with it and a note of any kind)
        for sent in ([HumanMessage(task.prompt)], [HumanMessage(task.prompt), first, *NOTE_KINDS[kind]()]):
            model._unread, model._raw = first, True  # the same state before each of the two prompts
            reply = model.invoke(sent)
            assert signature(reply) == (signature(first) if expected == "again" else plan_step(task))


def test_a_call_written_as_text_that_the_agent_read_is_the_models_call():
    task = task_named("search-calc-01")
    model, _ = first_then_clean(task, correct_rate=0.0, text_call_rate=1.0)
    step = task.plan[0]
    read = {"name": step.tool, "args": step.args, "id": "r1", "type": "tool_call"}
    sent = [HumanMessage(task.prompt), AIMessage("", tool_calls=[read]), ToolMessage("found it", tool_call_id="r1")]
    assert model.invoke(sent).tool_calls[0]["name"] == task.plan[1].tool  # it moves on, as after its own call


@pytest.mark.parametrize("protocol", ["json", "react", "call_tool"])
def test_a_text_protocols_call_written_as_text_is_prose_not_its_format(protocol):
    from reinloop_eval.simulated import SimulatedModel

    task = SUITE[0]
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, text_call_rate=1.0)
    reply = SimulatedModel(task=task, profile=profile, seed=11, protocol=protocol).invoke([HumanMessage(task.prompt)])
    assert reply.text.startswith(f"I will use {task.plan[0].tool} with {{")


def test_wrong_arguments_are_valid_count_as_the_step_and_lead_to_a_wrong_answer(tmp_path):
    from reinloop_eval.simulated import WRONG_ANSWER

    task = task_named("search-calc-01")
    model, first = first_then_clean(task, correct_rate=0.0, wrong_args_rate=1.0)
    step = task.plan[0]
    assert first.tool_calls[0]["name"] == step.tool and first.tool_calls[0]["args"] != step.args
    assert set(first.tool_calls[0]["args"]) == set(step.args)  # the same arguments, one value wrong
    messages = observe([HumanMessage(task.prompt)], first, "found it")
    second = model.invoke(messages)
    assert signature(second) == ("call", task.plan[1].tool, json.dumps(task.plan[1].args, sort_keys=True))
    final = model.invoke(observe(messages, second, "8.04672"))
    assert final.text == WRONG_ANSWER and not task.check(tmp_path, final.text)


def test_a_premature_answer_comes_before_the_plan_is_done_and_fails_the_check(tmp_path):
    task = task_named("search-calc-01")
    _, first = first_then_clean(task, correct_rate=0.0, premature_rate=1.0)
    assert not first.tool_calls and first.text and not task.check(tmp_path, first.text)


@pytest.mark.parametrize("correct_rate", [0.0, 1.0])
def test_a_near_repeat_loop_calls_the_same_tool_with_changed_arguments_until_it_corrects_itself(correct_rate):
    task = task_named("search-calc-01")  # web_search, then calculator
    step = task.plan[0]
    model = model_for(task, correct_rate, near_repeat_rate=1.0)
    call = {"name": step.tool, "args": step.args, "id": "s1", "type": "tool_call"}
    messages = [HumanMessage(task.prompt), AIMessage("", tool_calls=[call]), ToolMessage("found", tool_call_id="s1")]
    first = model.invoke(messages)
    assert first.tool_calls[0]["name"] == step.tool and first.tool_calls[0]["args"] != step.args
    model.profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=correct_rate)
    second = model.invoke(observe(messages, first, "found again"))
    if correct_rate == 0.0:  # on and on, changed once more each time
        assert second.tool_calls[0]["name"] == step.tool and second.tool_calls[0]["args"] not in (
            step.args,
            first.tool_calls[0]["args"],
        )
    else:
        assert second.tool_calls[0]["name"] == task.plan[1].tool


def test_reinloop_reads_calls_written_as_text_and_asks_again_after_empty_replies_where_create_agent_stops():
    from reinloop_eval.run import REASKING, paired

    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, correct_rate=0.5, text_call_rate=0.2, empty_rate=0.2)
    records = evaluate_suite(profile=profile, seed=100, tasks=12, agents=("reinloop", REASKING))
    comparison = paired(records, REASKING)
    assert comparison["wins"] > 0 and comparison["losses"] == 0
    by_run = {(r.agent, r.task): r for r in records}
    lost = [by_run[(REASKING, r.task)] for r in records if r.agent == "reinloop" and r.success]
    assert any(not peer.success and peer.finish == "answered" for peer in lost)  # its text or "" was the answer


def test_the_fault_wrappers_keep_each_tools_policy_but_run_in_this_process(tmp_path):
    from reinloop.tools import ToolRegistry
    from reinloop.tools.toolset import default_toolset
    from reinloop_eval.simulated import ToolStats, faulty_tools

    originals = ToolRegistry(default_toolset(tmp_path))
    wrapped = ToolRegistry(faulty_tools(default_toolset(tmp_path), NO_FAULTS, 0, ToolStats()))
    assert [entry.name for entry in wrapped] == [entry.name for entry in originals]
    for entry in wrapped:
        original = originals.get(entry.name)
        assert (entry.cacheable, entry.idempotent, entry.retryable) == (
            original.cacheable,
            original.idempotent,
            original.retryable,
        ), entry.name
        assert entry.isolation == "thread"  # the wrapper's draws and counts cannot cross to a worker process
    assert not wrapped.get("file_read").cacheable and not wrapped.get("current_time").cacheable


def test_no_garbage_collection_runs_during_a_run_and_its_garbage_is_collected_after(monkeypatch, tmp_path):
    # The evaluation's tool time limit (a quarter of the simulated hang) is as short as a full collection's
    # pause in a process that has run many agents: a collection during a run could time a call out.
    import gc

    from reinloop_eval import run

    seen = []

    def runner(model, tools, task, config):
        seen.append(gc.isenabled())
        return run.Outcome(task.answer, "answered")

    collections = []
    monkeypatch.setattr(run, "_runners", lambda profile, real=None: {"reinloop": runner})
    monkeypatch.setattr(gc, "collect", lambda generation=2: collections.append(generation) or 0)
    assert gc.isenabled()
    for _ in range(run.FULL_COLLECTION_EVERY):
        run.run_task("reinloop", SUITE[0], NO_FAULTS, 0, tmp_path)
    assert seen == [False] * run.FULL_COLLECTION_EVERY and gc.isenabled()
    assert collections.count(2) == 1 and collections.count(1) == run.FULL_COLLECTION_EVERY - 1


def test_prompt_tokens_count_the_tool_schemas_every_native_decision_sends(tmp_path):
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from reinloop.memory.tokens import TokenCounter
    from reinloop.testing import ScriptedChatModel
    from reinloop.tools.toolset import default_toolset
    from reinloop_eval.run import protocol_of

    tools = default_toolset(tmp_path, model=ScriptedChatModel(replies=[]))  # the translate tool included
    schemas = TokenCounter().tools([convert_to_openai_tool(tool) for tool in tools])
    agents = (*AGENTS, "preset seed-000", "preset seed-003")
    records = evaluate_suite(profile=FaultProfile(fault_rate=0.3), seed=3, tasks=6, agents=agents)
    for record in records:
        if protocol_of(record.agent) == "tool_calling":  # the naive loop binds the tools too, as it must
            assert record.tool_schema_tokens == record.decisions * schemas > 0
        else:  # a text protocol lists the tools in its system prompt, counted with the messages
            assert record.tool_schema_tokens == 0
        assert record.prompt_tokens > record.tool_schema_tokens


def test_a_real_models_prompt_tokens_count_the_tools_bound_to_it():
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from reinloop.memory.tokens import TokenCounter
    from reinloop.testing import ScriptedChatModel
    from reinloop_eval.run import _CallCounter

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    counter, messages = _CallCounter(), [HumanMessage("Add 2 and 3.")]
    ScriptedChatModel(replies=["5", "5"]).bind_tools([add]).invoke(messages, {"callbacks": [counter]})
    ScriptedChatModel(replies=["5"]).invoke(messages, {"callbacks": [counter]})
    tokens = TokenCounter()
    assert counter.calls == 2 and counter.tool_schema_tokens == tokens.tools([convert_to_openai_tool(add)]) > 0
    assert counter.prompt_tokens == 2 * tokens.messages(messages) + counter.tool_schema_tokens
    assert counter.completion_tokens == 2 * tokens.message(AIMessage("5")) > 0  # what it wrote, twice


def test_the_evaluation_records_cached_tokens_beside_the_prompt_tokens():
    from langchain_core.outputs import ChatGeneration, LLMResult

    from reinloop_eval import RunRecord, summarize_runs
    from reinloop_eval.run import _CallCounter

    counter = _CallCounter()
    usage = {"input_tokens": 100, "output_tokens": 5, "total_tokens": 105,
             "input_token_details": {"cache_read": 60, "cache_creation": 30}}  # fmt: skip
    counter.on_llm_end(LLMResult(generations=[[ChatGeneration(message=AIMessage("hi", usage_metadata=usage))]]))
    assert (counter.cache_read_tokens, counter.cache_write_tokens) == (60, 30)
    fields = dict(decisions=1, rounds=1, model_calls=1, prompt_tokens=100, completion_tokens=5, tool_schema_tokens=0,
                  tool_calls=0, wasted_tool_calls=0, exceeded_budget=False, crashed=False, finish="answered",
                  sim_s=0.0, wall_s=0.0)  # fmt: skip
    records = [RunRecord("reinloop", "t", 0, True, **fields, cache_read_tokens=60, cache_write_tokens=30),
               RunRecord("reinloop", "t", 1, False, **fields)]  # fmt: skip
    row = summarize_runs(records)["reinloop"]
    assert (row["cache_read_tokens"], row["cache_write_tokens"]) == (60, 30)
    assert row["tokens_per_success"] == 210  # cached tokens count whole, as before


@pytest.mark.parametrize(
    ("answer", "expect", "states"),
    [
        ("The result is 437.", "437", True),
        ("437, as asked", "437", True),
        ("4378", "437", False),
        ("1437", "437", False),
        ("437.5", "437", False),
        ("0.437", "437", False),
        ("About 8,848.86 metres.", "8,848.86", True),
        ("Bonjour !", "bonjour", True),
        ("On 29 May 1953.", "29 May 1953", True),
    ],
)
def test_an_answer_states_a_number_only_as_a_whole_number(answer, expect, states):
    assert holds(answer, expect) is states


# shared draws and the paired comparison -------------------------------------------------------------------


def signature(reply):
    """A reply without its random call ids: what the model decided."""
    if reply.invalid_tool_calls:
        return ("malformed", reply.invalid_tool_calls[0]["name"])
    if reply.tool_calls:
        return ("call", reply.tool_calls[0]["name"], json.dumps(reply.tool_calls[0]["args"], sort_keys=True))
    return ("answer", reply.text)


def test_every_agent_meets_the_same_fault_at_its_first_decision(monkeypatch):
    from reinloop_eval.simulated import SimulatedModel

    decide, log, firsts = SimulatedModel._decide, [], {}

    def recording(self, messages):
        reply = decide(self, messages)
        log.append((self.decisions, signature(reply)))
        return reply

    def after_run(agent, task):
        firsts.setdefault(task, {})[agent] = next(sig for index, sig in log if index == 1)
        log.clear()

    monkeypatch.setattr(SimulatedModel, "_decide", recording)
    evaluate_suite(profile=FaultProfile(fault_rate=0.6, tool_fault_rate=0.0), seed=5, tasks=12, progress=after_run)
    assert all(len(set(by_agent.values())) == 1 for by_agent in firsts.values()), firsts
    plan = {task.id: ("call", task.plan[0].tool, json.dumps(task.plan[0].args, sort_keys=True)) for task in SUITE}
    faulty = [task for task, by_agent in firsts.items() if by_agent["reinloop"] != plan[task]]
    assert 0 < len(faulty) < len(firsts)  # faults were drawn, the same for every agent, not at every task


def test_the_nth_tool_call_meets_the_same_tool_fault_whichever_tool_an_agent_calls(tmp_path):
    from langchain_core.tools import ToolException

    from reinloop.tools.toolset import default_toolset
    from reinloop_eval.simulated import ToolStats, faulty_tools

    profile = FaultProfile(tool_fault_rate=0.5, slow_s=0.0)
    calls = {"calculator": {"expression": "1 + 1"}, "web_search": {"query": "speed of light", "max_results": 1}}

    def outcomes(order, handle_errors):
        tools = faulty_tools(default_toolset(tmp_path), profile, 1234, ToolStats(), handle_errors=handle_errors)
        by_name, seen = {tool.name: tool for tool in tools}, []
        for name in order:
            try:
                result = by_name[name].invoke(calls[name])
            except (ConnectionError, ToolException):
                seen.append("raised")
            else:
                seen.append("error" if str(result).startswith("Error") else "empty" if result == "" else "result")
        return seen

    alone = outcomes(["calculator"] * 16, handle_errors=False)
    mixed = outcomes(["web_search", "calculator"] * 8, handle_errors=False)
    handled = outcomes(["calculator"] * 16, handle_errors=True)
    assert alone == mixed and {"raised", "empty", "result"} <= set(alone)
    # a tool that handles its errors meets the same faults, and answers an exception with an error observation
    assert handled == ["error" if seen == "raised" else seen for seen in alone]


def record(agent, task, seed, success):
    from dataclasses import fields

    from reinloop_eval.run import RunRecord

    blank = {field.name: "" if field.type == "str" else 0 for field in fields(RunRecord)}  # every other figure nil
    return RunRecord(**{**blank, "agent": agent, "task": task, "seed": seed, "success": success})


def test_the_paired_comparison_counts_only_shared_runs_and_bounds_the_difference():
    from reinloop_eval.run import paired, paired_all

    records = []
    for number in range(40):  # reinloop solves 30, the peer 20: 12 only reinloop, 2 only the peer
        records.append(record("reinloop", f"t{number}", 0, number < 30))
        records.append(record("peer", f"t{number}", 0, number < 18 or number in (35, 36)))
    records.append(record("peer", "t99", 0, True))  # not run by reinloop: no pair
    result = paired(records, "peer")
    assert (result["pairs"], result["wins"], result["losses"]) == (40, 12, 2)
    assert result["difference"] == pytest.approx(10 / 40)
    assert 0 < result["low"] < result["difference"] < result["high"] < 0.5
    assert paired(records, "peer") == result  # a seeded bootstrap: the same interval every time
    same = paired([*records[::2], *(record("twin", r.task, 0, r.success) for r in records[::2])], "twin")
    assert (same["wins"], same["losses"], same["low"], same["high"]) == (0, 0, 0.0, 0.0)
    # a few discordant pairs either way: the interval straddles zero
    close = [record("reinloop", f"t{n}", 0, n in (0, 1, 2)) for n in range(10)]
    close += [record("peer", f"t{n}", 0, n in (0, 3)) for n in range(10)]
    result = paired(close, "peer")
    assert (result["wins"], result["losses"]) == (2, 1) and result["low"] < 0 < result["high"]
    assert list(paired_all(close)) == ["peer"] and paired_all([r for r in close if r.agent == "peer"]) == {}


def test_tuning_and_reporting_seeds_are_apart_and_the_defaults_report():
    from reinloop.cli.parser import build_parser
    from reinloop_eval import GridSpec
    from reinloop_eval.run import REPORTING_SEEDS, TUNING_SEEDS

    assert set(TUNING_SEEDS) == set(range(9)) and not set(TUNING_SEEDS) & set(REPORTING_SEEDS)
    assert GridSpec().seeds == REPORTING_SEEDS
    args = build_parser().parse_args(["eval"])
    assert args.seed in REPORTING_SEEDS and tuple(args.seeds) == REPORTING_SEEDS


# the peers ------------------------------------------------------------------------------------------------


def test_the_plain_create_agent_meets_a_tool_exception_as_an_error_observation_not_a_crash():
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.5, slow_s=0.0)
    records = evaluate_suite(profile=profile, seed=2, tasks=12, agents=("naive loop", "create_agent"))
    crashes = {
        agent: [r.task for r in records if r.agent == agent and r.crashed] for agent in ("naive loop", "create_agent")
    }
    assert crashes["naive loop"] and not crashes["create_agent"]  # the same tool faults: the naive loop crashes


def test_the_reasking_middleware_asks_again_after_a_reply_of_malformed_calls_only():
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from reinloop.testing import ScriptedChatModel
    from reinloop_eval.run import MALFORMED_NOTE, ReaskAfterMalformedReply

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    bad = {"type": "invalid_tool_call", "id": "x", "name": "add", "args": '{"a": 2', "error": None}

    def script():
        return [AIMessage("", invalid_tool_calls=[bad]), AIMessage("", invalid_tool_calls=[bad]), "5"]

    plain = create_agent(ScriptedChatModel(replies=script()), [add])
    assert plain.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"][-1].invalid_tool_calls  # ends there
    once = ReaskAfterMalformedReply(retries=1, persist=False)
    ended = create_agent(ScriptedChatModel(replies=script()), [add], middleware=[once])
    assert ended.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"][-1].invalid_tool_calls
    # persisting: the reply still malformed after the retry stays, with a note, and the model is called again
    persists = ReaskAfterMalformedReply(retries=1)
    goes_on = create_agent(ScriptedChatModel(replies=script()), [add], middleware=[persists])
    messages = goes_on.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"]
    assert messages[-1].text == "5" and persists.reasks == 1
    # create_agent answers the kept malformed call with an error tool message of its own, then comes the note
    kinds = ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert [type(m).__name__ for m in messages] == kinds
    assert messages[1].invalid_tool_calls and messages[2].status == "error" and messages[3].text == MALFORMED_NOTE
    twice = ReaskAfterMalformedReply(retries=2)
    result = create_agent(ScriptedChatModel(replies=script()), [add], middleware=[twice])
    messages = result.invoke({"messages": [HumanMessage("2 + 3?")]})["messages"]
    assert messages[-1].text == "5" and twice.reasks == 2
    assert not any(getattr(m, "invalid_tool_calls", None) for m in messages)  # the dropped replies never reach it


# simulated time -------------------------------------------------------------------------------------------


def test_a_rerun_of_a_point_gives_the_same_figures_for_every_agent_slow_calls_and_timeouts_included():
    from reinloop_eval import summarize_runs
    from reinloop_eval.simulated import TOOL_TIMEOUT_S

    profile = FaultProfile(fault_rate=0.3, correct_rate=0.5, tool_fault_rate=0.6)
    assert profile.slow_s > TOOL_TIMEOUT_S  # reinloop's timeout gives up on a slow call, the others wait
    first = evaluate_suite(profile=profile, seed=101, tasks=8)
    again = evaluate_suite(profile=profile, seed=101, tasks=8)
    assert without_time(first) == without_time(again)
    assert summarize_runs(first) == summarize_runs(again)  # every figure of the summary, for every agent
    waited = {agent: sum(r.sim_s for r in first if r.agent == agent) for agent in AGENTS}
    # slow calls happened: the peers waited them out (slow_s each), reinloop stopped at its timeout
    peer = "create_agent + middleware"
    assert waited["reinloop"] > 0 and waited[peer] > 0
    assert waited["reinloop"] / TOOL_TIMEOUT_S == pytest.approx(round(waited["reinloop"] / TOOL_TIMEOUT_S))
    assert waited[peer] / profile.slow_s == pytest.approx(round(waited[peer] / profile.slow_s))


def test_the_timer_and_the_models_latency_advance_simulated_time_without_sleeping():
    import time

    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, latency_s=30.0)
    start = time.perf_counter()
    records = evaluate_suite(profile=profile, tasks=1, agents=("reinloop", "create_agent"))  # calc-01
    timer = [task for task in SUITE if task.id == "timer-01"]
    assert time.perf_counter() - start < 30
    for record in records:  # two decisions: the call and the answer, 30 simulated seconds each
        assert record.success and record.sim_s == 60.0
    from reinloop_eval.run import run_task

    waited = run_task(
        "reinloop", timer[0], FaultProfile(fault_rate=0.0, tool_fault_rate=0.0), 0, Path(tempfile.mkdtemp())
    )
    assert waited.success and waited.sim_s == pytest.approx(0.1)


def test_a_slow_call_hangs_until_its_run_ends_for_an_agent_with_a_shorter_timeout_and_not_at_all_for_others(tmp_path):
    import threading

    from reinloop.tools.toolset import default_toolset
    from reinloop_eval.simulated import TOOL_TIMEOUT_S, SimulatedClock, ToolStats, _tool_fault, faulty_tools

    profile = FaultProfile(tool_fault_rate=1.0)
    seed = next(seed for seed in range(1000) if _tool_fault(profile, seed, 0) == "slow")
    args = {"expression": "2 + 2"}

    def calculator(clock, timeout_s):
        tools = faulty_tools(default_toolset(tmp_path), profile, seed, ToolStats(), clock=clock, timeout_s=timeout_s)
        return next(tool for tool in tools if tool.name == "calculator")

    waits = SimulatedClock()
    assert calculator(waits, None).invoke(args) == "4" and waits.seconds == profile.slow_s  # at once, no sleep
    gives_up = SimulatedClock()
    results = []
    call = threading.Thread(target=lambda: results.append(calculator(gives_up, TOOL_TIMEOUT_S).invoke(args)))
    call.start()
    call.join(3 * TOOL_TIMEOUT_S)
    assert call.is_alive() and results == []  # hangs past any timeout the agent has
    gives_up.released.set()  # the run ended
    call.join(5)
    assert results == ["4"] and gives_up.seconds == TOOL_TIMEOUT_S


# cost -----------------------------------------------------------------------------------------------------


def test_every_model_call_of_a_run_is_metered_summaries_and_translations_included_with_its_completion():
    from reinloop.memory.tokens import TOKENS_PER_REPLY, TokenCounter
    from reinloop_eval.simulated import Meter, SimulatedModel, message_tokens, summarizer_of

    task = task_named("translate-01")
    meter = Meter()
    model = SimulatedModel(task=task, profile=NO_FAULTS, meter=meter)
    counter = TokenCounter()
    decision = model.invoke([HumanMessage(task.prompt)])
    summary = summarizer_of(model).invoke([HumanMessage("- step one")])
    asked = [HumanMessage("You are a professional translator. Translate into French."), HumanMessage("good morning")]
    translation = model.invoke(asked)
    assert translation.text == "Bonjour" and summary.text.startswith("Summary:")
    assert meter.calls == 3 and model.decisions == 1  # a summary and a translation are model calls, not decisions
    written = sum(message_tokens(counter, [reply]) - TOKENS_PER_REPLY for reply in (decision, summary, translation))
    assert meter.completion_tokens == written > 0
    assert meter.prompt_tokens > model.prompt_tokens  # the decisions' part is what the model alone counted


def test_a_malformed_calls_arguments_are_tokens_both_written_and_sent_again():
    from reinloop.memory.tokens import TokenCounter
    from reinloop_eval.simulated import message_tokens

    counter = TokenCounter()
    args = '{"expression": "1 + 1 + 1'
    bad = {"type": "invalid_tool_call", "id": "m1", "name": "calculator", "args": args, "error": None}
    malformed, empty = AIMessage("", invalid_tool_calls=[bad]), AIMessage("")
    extra = counter.text("calculator") + counter.text(bad["args"])
    assert message_tokens(counter, [malformed]) == message_tokens(counter, [empty]) + extra
    assert counter.messages([malformed]) == counter.messages([empty])  # what reinloop's own counter leaves out


def test_rounds_leave_out_re_asks_alike_and_model_calls_cover_every_decision():
    from reinloop_eval import summarize_runs
    from reinloop_eval.agents import FAIR_PEER, REINLOOP_AGENTS
    from reinloop_eval.run import REASKING

    records = evaluate_suite(profile=FaultProfile(fault_rate=0.6, correct_rate=0.3), seed=100, tasks=10)
    for record in records:
        assert record.model_calls >= record.decisions and record.completion_tokens > 0
        if record.agent not in (REASKING, FAIR_PEER, *REINLOOP_AGENTS):
            assert record.rounds == record.decisions  # no re-ask: every decision is a round
    assert any(r.rounds < r.decisions for r in records if r.agent == REASKING)
    assert any(r.rounds < r.decisions for r in records if r.agent == FAIR_PEER)
    assert any(r.rounds < r.decisions for r in records if r.agent == "reinloop")
    for agent, row in summarize_runs(records).items():
        runs = [r for r in records if r.agent == agent]
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in runs)
        assert row["tokens_per_success"] == pytest.approx(tokens / max(1, row["successes"]), abs=0.1)
