"""BFCL end to end on a small sample: its own environment and worker, its entries as tools and replay plans, the
replaying model through reinloop and the peers, BFCL's checkers scoring what each run executed."""

import json
import os
import subprocess

import pytest

from reinloop.tools.json_schema import JsonArgsValidator
from reinloop_eval.bfcl import (
    BFCL_AGENTS,
    CATEGORIES,
    Bfcl,
    bfcl_python,
    load_tasks,
    replay_faults,
    run_bfcl,
    run_task,
    summarize_bfcl,
    wilson,
    write_bfcl_report,
)
from reinloop_eval.bfcl.report import ALL
from reinloop_eval.bfcl.run import RECAP, turn_prompt
from reinloop_eval.bfcl.tasks import SHOWN_EMPTY, Executed, call_text

SAMPLE = 2  # tasks per category


@pytest.fixture(scope="module")
def bfcl():
    try:
        python = bfcl_python()  # made on first use: a virtual environment of seven packages (scripts/test.sh)
    except subprocess.CalledProcessError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs BFCL's environment (scripts/test.sh installs it): {exc}")
        pytest.skip(f"BFCL's environment could not be made: {exc}")
    with Bfcl(python) as running:
        yield running


@pytest.fixture(scope="module")
def sample(bfcl):
    return load_tasks(bfcl, CATEGORIES, SAMPLE)


@pytest.fixture(scope="module")
def faultless(bfcl, sample):
    return run_bfcl(sample, bfcl, agents=BFCL_AGENTS, seeds=(0,))


def test_the_sample_holds_each_category_with_its_tools_and_plan(sample):
    assert [task.category for task in sample] == [category for category in CATEGORIES for _ in range(SAMPLE)]
    for task in sample:
        assert len(task.plan) == len(task.turns) and all(task.plan)
        names = {spec["name"] for spec in task.tools}
        assert all("." not in name for name in names)
        assert {step.tool for turn in task.plan for step in turn} <= names


def test_with_no_faults_the_replaying_model_scores_every_task_through_every_agent(faultless, sample):
    assert len(faultless) == len(sample) * len(BFCL_AGENTS)
    failed = [(r.agent, r.task, r.error_type) for r in faultless if not r.success]
    assert failed == []
    assert all(not record.crashed and record.finishes[-1] == "answered" for record in faultless)
    summary = summarize_bfcl(faultless)
    assert summary[ALL]["reinloop"]["accuracy"] == 1.0
    assert set(summary) == {*CATEGORIES, ALL}


def test_each_run_scored_the_calls_it_executed(faultless, sample):
    plans = {task.id: task for task in sample}
    for record in faultless:
        task = plans[record.task]
        if task.multi_turn:
            assert record.calls == [
                [[call_text(task.function_of(step.tool), step.args) for step in turn]] for turn in task.plan
            ]
        else:
            assert record.calls == [{task.function_of(step.tool): step.args} for step in task.plan[0]]
        assert record.tool_calls == sum(len(turn) for turn in task.plan)
        assert record.decisions > 0 and record.prompt_tokens > 0


def test_a_wrong_call_is_scored_wrong_by_the_ast_checker(bfcl, sample):
    for task in (task for task in sample if not task.multi_turn):
        right = [{task.function_of(step.tool): step.args} for step in task.plan[0]]
        assert bfcl.score_ast(task.id, right)["valid"]
        [(name, args)] = right[0].items()
        key = next(iter(args))
        wrong = [{name: {**args, key: _wrong(args[key])}}, *right[1:]]
        verdict = bfcl.score_ast(task.id, wrong)
        assert not verdict["valid"] and verdict["error_type"]
        assert not bfcl.score_ast(task.id, right + right[:1])["valid"]  # one call too many
        assert not bfcl.score_ast(task.id, [])["valid"]


def test_a_missing_or_wrong_call_is_scored_wrong_by_the_multi_turn_checker(bfcl, sample):
    task = next(task for task in sample if task.multi_turn)
    turns = [[call_text(task.function_of(step.tool), step.args) for step in turn] for turn in task.plan]
    # Each check runs the calls afresh in environments kept under its own key.
    assert bfcl.score_multi_turn("check_right", task.id, [[calls] for calls in turns])["valid"]
    short = [[calls] for calls in turns[:-1]] + [[turns[-1][:-1]] if turns[-1][:-1] else []]
    assert not bfcl.score_multi_turn("check_short", task.id, short)["valid"]
    assert not bfcl.score_multi_turn("check_nothing", task.id, [[] for _ in turns])["valid"]


def _wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1000
    if isinstance(value, str):
        return value + " nowhere"
    return [value, value]


def test_a_multi_turn_call_runs_in_bfcls_environment_and_a_later_turn_recaps_the_earlier(bfcl, sample):
    task = next(task for task in sample if task.multi_turn)
    record = run_task("reinloop", task, 0, bfcl)
    assert record.success
    executed = Executed(turns=[[("cd", {"folder": "docs"}, '{"current_working_directory": "docs"}')], []])
    prompt = turn_prompt(task, 1, executed, ["Moved to docs."])
    assert prompt.startswith(RECAP) and prompt.endswith(task.turns[1])
    assert f"- The user asked: {task.turns[0]}" in prompt
    assert 'You called cd(folder=\'docs\'): {"current_working_directory": "docs"}' in prompt
    assert "You answered: Moved to docs." in prompt
    assert turn_prompt(task, 0, Executed(), []) == task.turns[0]
    assert all(json.loads(shown)["result"] in (None, {}, [], "") for shown in SHOWN_EMPTY.values())


def test_a_call_bfcl_answers_with_nothing_is_shown_as_a_result_and_the_replay_goes_on(bfcl):
    # multi_turn_base_0 runs mkdir (BFCL's result: "None") and cd(folder='..') ("{}"), which would read as failed.
    [task] = [task for task in load_tasks(bfcl, ["multi_turn_base"]) if task.id == "multi_turn_base_0"]
    record = run_task("reinloop", task, 0, bfcl)
    assert record.success and record.finishes == ["answered"] * len(task.turns)


def test_under_faults_every_run_ends_with_a_verdict(bfcl, sample, tmp_path):
    records = run_bfcl(sample, bfcl, agents=BFCL_AGENTS, seeds=(1,), profile=replay_faults(0.5))
    assert len(records) == len(sample) * len(BFCL_AGENTS)
    assert all(record.success or record.error_type for record in records)
    assert not any(record.crashed for record in records)
    tables = write_bfcl_report(records, {"fault_rate": 0.5}, tmp_path)
    data = json.loads((tmp_path / "bfcl.json").read_text())
    assert data["settings"] == {"fault_rate": 0.5} and len(data["runs"]) == len(records)
    assert "### multi_turn_base" in tables and tables in (tmp_path / "bfcl.md").read_text()


def test_the_multi_turn_reads_are_declared_idempotent_and_every_other_function_not(bfcl):
    from reinloop.tools.registry import POLICY_KEY
    from reinloop_eval.bfcl.tasks import READ_ONLY, bfcl_tools

    tasks = load_tasks(bfcl, ["multi_turn_base"])
    assert {name for task in tasks for name in task.functions} >= READ_ONLY  # every name is one of BFCL's
    task = next(task for task in tasks if {"ls", "mkdir"} <= set(task.functions))
    policies = {tool.name: tool.metadata[POLICY_KEY] for tool in bfcl_tools(task, Executed(), bfcl, "run")}
    assert policies["ls"] == {"cacheable": False, "idempotent": True}
    assert policies["mkdir"] == policies["cd"] == {"cacheable": False, "idempotent": False}


# The ground-truth calls whose values BFCL's own function docs declare another type for: a validating loop
# refuses them (each a finding about BFCL's data, not about the loop).
REFUSED_GROUND_TRUTH = {"parallel_multiple_21", "parallel_multiple_94", "multi_turn_base_173"}


def test_reinloops_validator_accepts_every_tool_and_refuses_only_three_ground_truth_calls(bfcl):
    refused = set()
    for task in load_tasks(bfcl, CATEGORIES):
        validators = {spec["name"]: JsonArgsValidator.for_tool(spec["name"], spec["parameters"]) for spec in task.tools}
        if any(validators[step.tool].problems(step.args) for turn in task.plan for step in turn):
            refused.add(task.id)
    assert refused == REFUSED_GROUND_TRUTH


@pytest.mark.parametrize(
    ("successes", "runs", "low", "high"),
    [(0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (5, 10, 0.2366, 0.7634), (0, 0, 0.0, 1.0)],
    ids=["none", "all", "half", "no-runs"],
)
def test_the_wilson_interval(successes, runs, low, high):
    assert wilson(successes, runs) == pytest.approx((low, high), abs=1e-4)
