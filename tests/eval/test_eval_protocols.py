"""The simulated model writes every protocol's format with the same decisions and faults, and reads its prompt
back through the protocol, so that agents with different protocols compare loops, not formats."""

import random
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from reinloop import AgentConfig, build_agent
from reinloop.presets import PRESETS, preset
from reinloop.protocols import get_protocol
from reinloop.tools.registry import ToolRegistry
from reinloop.tools.toolset import default_toolset
from reinloop_eval import SUITE, FaultProfile, SimulatedModel, evaluate_suite
from reinloop_eval.run import PRESET_AGENTS, protocol_of
from reinloop_eval.simulated import _observed, _progress, read_back, written

TEXT_PROTOCOLS = ["json", "react", "call_tool"]
STEPS = [step for task in SUITE for step in task.plan]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    model = SimulatedModel(task=SUITE[0], profile=FaultProfile())
    return ToolRegistry(default_toolset(tmp_path_factory.mktemp("tools"), model=model))


def call(name, args, call_id="call_1"):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@pytest.mark.parametrize("name", TEXT_PROTOCOLS)
def test_every_plan_step_is_written_so_that_the_protocol_reads_the_same_call(name, registry):
    protocol = get_protocol(name)
    for step in STEPS:
        decision, stored = protocol.parse(written(protocol, call(step.tool, step.args)), registry)
        assert decision["kind"] == "act", (step, decision)
        assert [(c["name"], c["args"]) for c in decision["calls"]] == [(step.tool, step.args)]
        assert stored is not None and stored.text == ""


@pytest.mark.parametrize("name", TEXT_PROTOCOLS)
def test_every_answer_is_written_as_the_protocols_final_answer(name, registry):
    protocol = get_protocol(name)
    for task in SUITE:
        decision, _ = protocol.parse(written(protocol, AIMessage(task.answer)), registry)
        assert decision["kind"] == "answer" and decision["answer"] == task.answer.strip()


@pytest.mark.parametrize("name", TEXT_PROTOCOLS)
def test_a_malformed_call_is_unreadable_in_every_format_and_names_the_tool(name, registry):
    protocol = get_protocol(name)
    model = SimulatedModel(task=SUITE[0], profile=FaultProfile())
    for step in STEPS:
        native = model._step(step, "malformed", None)  # the fault as the native model writes it
        text = written(protocol, native)
        decision, stored = protocol.parse(text, registry)
        assert decision["kind"] == "unparsable" and stored is None, (step, text.text)
        assert step.tool in text.text


@pytest.mark.parametrize("name", TEXT_PROTOCOLS)
def test_the_prompt_is_read_back_as_the_native_conversation(name):
    """Progress, the last call and whether it failed come out the same as from native messages."""
    task = next(task for task in SUITE if len(task.plan) >= 2)
    first, second = task.plan[:2]
    native = [
        HumanMessage(task.prompt),
        call(first.tool, first.args, "a"),
        ToolMessage("some result", tool_call_id="a"),
        call(second.tool + "_tool", second.args, "b"),
        ToolMessage("Error: 'x' is not a valid tool.", tool_call_id="b", status="error"),
        HumanMessage("A note from the agent."),
    ]
    protocol = get_protocol(name)
    back = read_back(protocol, protocol.render(native))
    assert _progress(task, back) == _progress(task, native) == 1
    failed, succeeded = _observed(back, back[3].tool_calls[0])
    assert succeeded is None and failed is not None
    assert (failed["name"], failed["args"]) == (second.tool + "_tool", second.args)
    assert [type(m) for m in back] == [type(m) for m in native]


@pytest.mark.parametrize("name", TEXT_PROTOCOLS)
def test_reinloop_solves_the_suite_in_each_format_without_faults_and_never_crashes_with_them(name, tmp_path):
    extra_decisions = 0
    for fault_rate, tasks in ((0.0, SUITE[::5]), (0.5, SUITE[:8])):
        profile = FaultProfile(fault_rate=fault_rate, correct_rate=0.5, tool_fault_rate=0.0)
        for task in tasks:
            seed = random.Random(task.id).randrange(1 << 30)
            model = SimulatedModel(task=task, profile=profile, seed=seed, protocol=name)
            workspace = Path(tmp_path) / f"{fault_rate}-{task.id}"
            agent = build_agent(model, default_toolset(workspace, model=model), config=AgentConfig(protocol=name))
            result = agent.invoke({"task": task.prompt})
            if fault_rate == 0.0:
                assert task.check(workspace, result["final_answer"]), (task.id, result["finish_reason"])
                assert model.decisions == len(task.plan) + 1
            else:
                assert result["finish_reason"] in ("answered", "error_streak", "dead_loop", "max_iterations")
                extra_decisions += model.decisions - len(task.plan) - 1
    assert extra_decisions > 0  # the faults took effect


def test_every_preset_runs_the_whole_suite_in_its_protocol_without_a_crash_and_within_its_rounds():
    profile = FaultProfile(fault_rate=0.3, correct_rate=0.5, tool_fault_rate=0.2, slow_s=0.04)
    records = evaluate_suite(profile=profile, seed=3, agents=PRESET_AGENTS)
    assert len(records) == len(SUITE) * len(PRESETS)
    assert [(r.agent, r.task, r.finish) for r in records if r.crashed] == []
    for record in records:
        limit = preset(record.agent.removeprefix("preset ")).max_iterations
        assert record.rounds <= limit, record
    by_agent = {agent: [r for r in records if r.agent == agent] for agent in PRESET_AGENTS}
    # each writes its own format and still solves most tasks: the simulated model speaks every protocol
    assert all(sum(r.success for r in runs) >= len(SUITE) // 2 for runs in by_agent.values()), {
        agent: sum(r.success for r in runs) for agent, runs in by_agent.items()
    }
    assert [protocol_of(agent) for agent in PRESET_AGENTS] == ["tool_calling", "react", "json", "call_tool"]
