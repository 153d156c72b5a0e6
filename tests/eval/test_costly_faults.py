"""The costly faults (issue 46, item 3): a repeated payment is a harmful execution, an invalid argument reaches a
peer's tool but not reinloop's, a reply can be lost after its payment, a hopeless task is done well only by a
typed stop, and the report pairs these measures with reinloop."""

import json
from dataclasses import asdict, replace

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from pydantic import ValidationError

from reinloop import AgentConfig, build_agent
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools.toolset import default_toolset
from reinloop_eval import SUITE, FaultProfile, evaluate_suite, write_report
from reinloop_eval.costly_report import costly_measures
from reinloop_eval.faults import (
    COSTLY_FAULTS,
    COSTLY_FAULTS_FILE,
    CostlyFaults,
    costly_profile,
    lost_reply_draw,
    tool_draws,
)
from reinloop_eval.meters import ToolStats
from reinloop_eval.payments import costly_tools, payments_made
from reinloop_eval.tasks import COSTLY_TASKS, tasks_for
from reinloop_eval.tool_faults import TOOL_FAULTS, faulty_tools

NO_COSTLY = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0)
COSTLY_NO_FAULTS = FaultProfile(fault_rate=0.0, tool_fault_rate=0.0, costly=True)
PAY_01 = next(task for task in COSTLY_TASKS if task.id == "pay-01")
PAYMENT = dict(PAY_01.payment or {})


def tools_of(workspace, profile=COSTLY_NO_FAULTS, stats=None, *, seed=0, handle_errors=False):
    tools = default_toolset(workspace) + costly_tools(profile, workspace)
    return faulty_tools(tools, profile, seed, stats or ToolStats(), handle_errors=handle_errors)


def run_create_agent(replies, tools):
    agent = create_agent(ScriptedChatModel(replies=replies), tools)
    agent.invoke({"messages": [HumanMessage(PAY_01.prompt)]})


def run_reinloop(replies, tools):
    agent = build_agent(ScriptedChatModel(replies=replies), tools, config=AgentConfig(max_iterations=5))
    return agent.invoke({"task": PAY_01.prompt})


def test_the_costly_faults_are_the_committed_files_and_off_by_default():
    assert CostlyFaults.read(COSTLY_FAULTS_FILE) == COSTLY_FAULTS
    assert COSTLY_FAULTS.non_idempotent_tools == ("send_payment",)
    profile = costly_profile(FaultProfile(runaway_rounds=5))
    assert profile.costly and profile.runaway_rate == COSTLY_FAULTS.runaway_rate and profile.runaway_rounds is None
    assert not FaultProfile().costly
    assert tasks_for(FaultProfile()) == SUITE and tasks_for(profile, 3) == SUITE[:3] + COSTLY_TASKS
    assert costly_tools(FaultProfile(), COSTLY_FAULTS_FILE.parent) == []


def test_a_payment_made_again_is_a_harmful_execution(tmp_path):
    pay = next(tool for tool in tools_of(tmp_path) if tool.name == "send_payment")
    pay.invoke(PAYMENT)
    assert PAY_01.check(tmp_path, None) and PAY_01.harmful_executions(tmp_path) == 0
    pay.invoke(PAYMENT)
    pay.invoke({**PAYMENT, "amount": 12.0})  # a payment the task did not ask for
    assert PAY_01.check(tmp_path, None) and PAY_01.harmful_executions(tmp_path) == 2


def test_a_peer_pays_a_repeated_call_twice_where_reinloop_answers_it_from_the_first_payment(tmp_path):
    replies = [tool_call("send_payment", PAYMENT), tool_call("send_payment", PAYMENT), "Paid."]
    run_create_agent(list(replies), tools_of(tmp_path / "peer", handle_errors=True))
    result = run_reinloop(list(replies), tools_of(tmp_path / "reinloop"))
    assert PAY_01.harmful_executions(tmp_path / "peer") == 1
    assert PAY_01.harmful_executions(tmp_path / "reinloop") == 0 and result["final_answer"] == "Paid."
    assert len(payments_made(tmp_path / "reinloop")) == 1


def test_a_mistyped_argument_reaches_a_peers_tool_and_pays_but_never_reaches_reinloops(tmp_path):
    mistyped = {**PAYMENT, "payee": [PAYMENT["payee"]]}
    peer, ours = ToolStats(), ToolStats()
    replies = [tool_call("send_payment", mistyped), tool_call("calculator", {"expression": ["1 + 1"]}), "Done."]
    run_create_agent(list(replies), tools_of(tmp_path / "peer", stats=peer, handle_errors=True))
    run_reinloop(list(replies), tools_of(tmp_path / "reinloop", stats=ours))
    assert payments_made(tmp_path / "peer") == [mistyped]  # sent on as it came: a payment nobody asked for
    assert PAY_01.harmful_executions(tmp_path / "peer") == 1
    # the calculator checks its own arguments: it ran and failed
    assert (peer.executed, peer.succeeded) == (2, 1)
    assert payments_made(tmp_path / "reinloop") == [] and ours.executed == 0  # refused by validation first


def test_without_the_costly_faults_a_wrapped_tool_refuses_invalid_arguments_before_it_runs(tmp_path):
    stats = ToolStats()
    calculator = next(tool for tool in tools_of(tmp_path, NO_COSTLY, stats) if tool.name == "calculator")
    with pytest.raises(ValidationError):
        calculator.invoke({"expression": ["1 + 1"]})
    assert stats.executed == 0


def _seed_where(lost: bool) -> int:
    """A seed whose first tool call meets an injected exception, coming after the effect or not (`lost`)."""
    for seed in range(1000):
        _, which = tool_draws(seed, 0)  # tool_fault_rate 1.0: every call is hit
        exception = TOOL_FAULTS[int(which * len(TOOL_FAULTS))] == "exception"
        if exception and (lost_reply_draw(seed, 0) < COSTLY_FAULTS.lost_reply_share) == lost:
            return seed
    raise AssertionError("no such seed")


@pytest.mark.parametrize("lost", [True, False], ids=["after-the-payment", "before-it"])
def test_an_exception_of_a_payment_may_come_after_its_effect(tmp_path, lost):
    profile = FaultProfile(fault_rate=0.0, tool_fault_rate=1.0, costly=True)
    tools = tools_of(tmp_path, profile, seed=_seed_where(lost))
    pay = next(tool for tool in tools if tool.name == "send_payment")
    with pytest.raises(ConnectionError):
        pay.invoke(PAYMENT)
    assert payments_made(tmp_path) == ([PAYMENT] if lost else [])


def test_a_hopeless_task_is_done_well_only_by_a_quick_typed_stop_and_the_report_pairs_its_cost(tmp_path):
    agents = ("naive loop", "create_agent", "create_agent + middleware", "reinloop")
    records = evaluate_suite(profile=COSTLY_NO_FAULTS, tasks=0, agents=agents)
    assert {record.task for record in records} == {task.id for task in COSTLY_TASKS}
    payments = [record for record in records if not record.hopeless]
    assert all(record.success and record.harmful_executions == 0 for record in payments)
    hopeless = {(r.agent, r.task): r for r in records if r.hopeless}
    for task in (task.id for task in COSTLY_TASKS if task.hopeless):
        assert hopeless[("naive loop", task)].crashed and not hopeless[("naive loop", task)].success
        assert hopeless[("create_agent", task)].finish == "recursion_limit"  # the evaluation had to stop it
        assert hopeless[("create_agent + middleware", task)].finish == "call_limit"
        ours = hopeless[("reinloop", task)]
        assert ours.success and ours.finish not in ("answered", "max_iterations")
        assert ours.decisions < hopeless[("create_agent + middleware", task)].decisions
    measures = costly_measures(records)
    assert measures["reinloop"]["typed_stops"] == 4 and measures["create_agent"]["typed_stops"] == 0
    assert measures["create_agent + middleware"]["paired_hopeless_tokens"]["high"] < 0  # reinloop spends fewer
    # and runs the failing tool less often: the tool circuit, and no in-place retries of a call that may have acted
    assert measures["create_agent + middleware"]["paired_hopeless_tool_runs"]["high"] < 0
    assert 0 < measures["reinloop"]["hopeless_tool_runs"] < measures["create_agent + middleware"]["hopeless_tool_runs"]
    ours = measures["reinloop"]
    assert ours["hopeless_tokens_seeds"] == (ours["hopeless_tokens"],) * 2  # one seed: no spread
    write_report(records, COSTLY_NO_FAULTS, 0, tmp_path)
    assert "## Costly faults" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["costly"]["reinloop"]["hopeless_runs"] == 4
    assert asdict(records[0])["hopeless"] is False  # the run records say which runs were hopeless


def test_no_report_section_without_the_costly_faults(tmp_path):
    records = evaluate_suite(profile=NO_COSTLY, tasks=1, agents=("reinloop", "create_agent"))
    assert costly_measures(records) == {}
    write_report(records, NO_COSTLY, 0, tmp_path)
    assert "## Costly faults" not in (tmp_path / "report.md").read_text()


def test_runaways_are_the_same_runs_for_every_agent_and_the_report_pairs_their_tool_runs():
    # A model that, once it knows the answer, makes five new valid calls a decision: max_tool_attempts ends
    # reinloop's run at 60 tool runs; without that guard the 20-round budget lets it make about 100.
    profile = replace(costly_profile(COSTLY_NO_FAULTS), runaway_rate=1.0, runaway_width=5)
    agents = ("reinloop", "reinloop -max_tool_attempts", "create_agent + recovery")
    records = evaluate_suite(profile=profile, tasks=1, agents=agents)
    assert all(record.runaway for record in records)
    assert not any(r.runaway for r in evaluate_suite(profile=COSTLY_NO_FAULTS, tasks=1, agents=("reinloop",)))
    calc = {r.agent: r for r in records if r.task == SUITE[0].id}
    assert calc["reinloop"].finish == "max_tool_attempts" and calc["reinloop"].tool_calls <= 60
    assert calc["reinloop -max_tool_attempts"].finish == "max_iterations"
    assert calc["reinloop -max_tool_attempts"].tool_calls > 80
    measures = costly_measures(records)
    assert measures["reinloop"]["runaway_runs"] == len(records) // len(agents)
    assert measures["reinloop -max_tool_attempts"]["paired_runaway_tool_runs"]["high"] < 0
    assert measures["reinloop -max_tool_attempts"]["paired_runaway_tokens"]["high"] < 0  # it ends 7 rounds sooner
