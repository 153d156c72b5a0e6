"""The real-model benchmark with power: the task bank holds 200+ distinct tasks whose checks accept the plan's
answer and refuse a wrong one; every agent is sampled with the same seeds, temperature and reply cap, meets
the same tool faults and is held to the same context budget. The model is a scripted OpenAI-compatible server
(httpx's MockTransport): the requests it records are what the model was sent."""

import dataclasses
import json
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from reinloop.memory.tokens import TokenCounter
from reinloop.models import ChosenModel, openai_compatible_model
from reinloop.models.local import TranscriptJsonProtocol
from reinloop.protocols import FINAL_ANSWER_ACTION, OBSERVATION_LABEL
from reinloop.tools.registry import ToolRegistry
from reinloop.tools.toolset import default_toolset
from reinloop_eval import run as run_module
from reinloop_eval.real_benchmark import SAMPLED_AGENTS, Sampling, markdown_sampled, paired_costs, run_sampled
from reinloop_eval.task_bank import BANK_SIZE, task_bank
from reinloop_eval.tasks import holds
from reinloop_eval.written_calls import WrittenToolCalls

REPLY_CAP = 64
BUDGET_TOKENS = 3_400
BY_PROMPT = {task.prompt: task for task in task_bank()}


def test_the_bank_holds_at_least_200_distinct_tasks_selectable_by_count():
    bank = task_bank()
    assert len(bank) == BANK_SIZE >= 200
    assert len({task.id for task in bank}) == len({task.prompt for task in bank}) == BANK_SIZE
    assert task_bank(20) == bank[:20]
    assert len({task.id.split("-")[1] for task in task_bank(8)}) == 7  # the first eight mix every family
    with pytest.raises(ValueError, match="holds"):
        task_bank(BANK_SIZE + 1)


def test_every_bank_task_is_accepted_after_its_plan_and_refused_without_it(tmp_path):
    for task in task_bank():
        done, undone = tmp_path / task.id / "done", tmp_path / task.id / "undone"
        tools = {tool.name: tool for tool in default_toolset(done)}
        observations = [str(tools[step.tool].invoke(step.args)) for step in task.plan]
        if task.expect is not None:  # the plan's last observation states the expected value
            assert holds(observations[-1], task.expect), (task.id, observations[-1], task.expect)
        assert task.check(done, task.answer), task.id
        default_toolset(undone)
        assert not task.check(undone, "I could not do it."), task.id
        if task.expect is not None:
            assert not task.check(done, task.answer.replace(task.expect, task.expect + "1")), task.id


class ScriptedServer:
    """An OpenAI-compatible chat server that follows each task's plan in the json protocol, then answers; it
    records every request body."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        texts = [message["content"] for message in body["messages"]]
        start = max(i for i, text in enumerate(texts) if text.startswith("Task: ") or "\nTask: " in text)
        task = BY_PROMPT.get(texts[start].rsplit("Task: ", 1)[1])
        done = sum(text.startswith(OBSERVATION_LABEL) for text in texts[start:])
        if task is None:  # a summary's request, or the translate tool's
            decision = "summary"
        elif done < len(task.plan):
            step = task.plan[done]
            decision = json.dumps({"thought": "next step", "action": step.tool, "action_input": step.args})
        else:
            decision = json.dumps({"thought": "done", "action": FINAL_ANSWER_ACTION, "action_input": task.answer})
        choice = {"index": 0, "message": {"role": "assistant", "content": decision}, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [choice], "usage": usage})  # fmt: skip


def scripted_model(server: ScriptedServer) -> ChosenModel:
    chat = openai_compatible_model(
        "http://scripted.test/v1", "scripted", max_reply_tokens=REPLY_CAP, api_key="scripted", temperature=0,
        max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(server)),
    )  # fmt: skip
    config = {"context_token_budget": BUDGET_TOKENS, "max_reply_tokens": REPLY_CAP}
    return ChosenModel(chat, "scripted", "json", config, TranscriptJsonProtocol())


@pytest.fixture
def sampled(monkeypatch):
    """Three agents, four tasks, three seeds on the scripted server; each run's requests, and the tool fault
    wrappers' settings in the order the runs made them."""
    server, wrapped, runs = ScriptedServer(), [], []
    faulty = run_module.faulty_tools

    def spy(tools, profile, seed, stats, **kwargs):
        wrapped.append((profile, seed))
        return faulty(tools, profile, seed, stats, **kwargs)

    monkeypatch.setattr(run_module, "faulty_tools", spy)
    sampling = Sampling(temperature=0.7, seeds=(100, 101, 102), tool_fault_rate=0.2)

    def progress(agent, task, seed):
        runs.append(((agent, task, seed), server.requests[sum(len(r) for _, r in runs) :]))

    records = run_sampled(scripted_model(server), task_bank(4), sampling=sampling, progress=progress)
    return records, dict(runs), wrapped


def test_every_agent_is_sampled_with_the_same_temperature_reply_cap_and_seeds(sampled):
    records, runs, _ = sampled
    assert len(records) == 4 * 3 * len(SAMPLED_AGENTS)
    by_run: dict[tuple[str, int], dict[str, list[int]]] = {}
    for (agent, task, seed), requests in runs.items():
        assert requests, (agent, task, seed)
        assert {(r["temperature"], r["max_tokens"], r["max_completion_tokens"]) for r in requests} == {
            (0.7, REPLY_CAP, REPLY_CAP)
        }
        by_run.setdefault((task, seed), {})[agent] = [request["seed"] for request in requests]
    for (task, seed), seeds in by_run.items():
        first = {agent: calls[0] for agent, calls in seeds.items()}
        assert len(set(first.values())) == 1, (task, seed, first)  # the same seed for the same call
        assert all(len(set(calls)) == len(calls) for calls in seeds.values())  # a new seed for each call
    assert len({calls[0] for calls in (s[SAMPLED_AGENTS[0]] for s in by_run.values())}) == len(by_run)


def test_every_agent_meets_the_same_tool_faults(sampled):
    records, runs, wrapped = sampled
    assert len(wrapped) == len(records)
    for start in range(0, len(wrapped), len(SAMPLED_AGENTS)):  # the agents of one task at one seed
        assert len(set(wrapped[start : start + len(SAMPLED_AGENTS)])) == 1
        profile, _ = wrapped[start]
        assert profile.tool_fault_rate == 0.2 and profile.fault_rate == 0.0
    assert len({seed for _, seed in wrapped}) == len(wrapped) // len(SAMPLED_AGENTS)
    sent = [m["content"] for requests in runs.values() for r in requests for m in r["messages"]]
    assert any("simulated internal error" in text for text in sent)  # the faults reach the model
    assert "95% interval" in markdown_sampled(records)


def test_the_report_pairs_what_reinloop_spends_per_run_with_each_agent(sampled):
    records, _, _ = sampled
    by_run = {(r.agent, r.task, r.seed): r for r in records}
    for agent, costs in paired_costs(records).items():
        pairs = [(r, by_run[(agent, r.task, r.seed)]) for r in records if r.agent == "reinloop"]
        tokens = [mine.prompt_tokens + mine.completion_tokens - theirs.prompt_tokens - theirs.completion_tokens
                  for mine, theirs in pairs]  # fmt: skip
        decisions = [mine.decisions - theirs.decisions for mine, theirs in pairs]
        assert costs["tokens"]["pairs"] == len(pairs) == 12
        assert costs["tokens"]["difference"] == pytest.approx(sum(tokens) / len(tokens))
        assert costs["tokens"]["low"] <= costs["tokens"]["difference"] <= costs["tokens"]["high"]
        assert costs["tokens"]["losses"] == sum(t < 0 for t in tokens)  # the runs reinloop spent fewer
        assert costs["decisions"]["difference"] == pytest.approx(sum(decisions) / len(decisions))
    assert "tokens per run, reinloop - other" in markdown_sampled(records)


def test_the_peers_prompts_are_held_to_reinloops_context_budget():
    registry = ToolRegistry(default_toolset(Path("/tmp/unused-reinloop-budget")))
    protocol = TranscriptJsonProtocol()
    long = [HumanMessage("Task: compute things")]
    for n in range(40):
        call = {"name": "calculator", "args": {"expression": f"{n} + 1"}, "id": f"c{n}", "type": "tool_call"}
        long += [AIMessage("", tool_calls=[call]), ToolMessage("x " * 60, tool_call_id=f"c{n}")]
    counter = TokenCounter()
    unlimited = WrittenToolCalls(model=scripted_model(ScriptedServer()).model, protocol=protocol)
    held = unlimited.model_copy(update={"context_token_budget": 2_000})
    assert counter.messages(unlimited.prompt(long, registry)) > 2_000
    prompt = held.prompt(long, registry)
    assert counter.messages(prompt) <= 2_000
    assert any("Task: compute things" in m.text for m in prompt)  # the task stays
    assert prompt[-1].text.startswith(OBSERVATION_LABEL)  # the newest turn stays


def test_a_resumed_benchmark_runs_only_what_is_left_and_gives_the_uninterrupted_records():
    sampling = Sampling(temperature=0.7, seeds=(100, 101), tool_fault_rate=0.2)
    whole = run_sampled(scripted_model(ScriptedServer()), task_bank(2), sampling=sampling)
    server, new = ScriptedServer(), []
    resumed = run_sampled(scripted_model(server), task_bank(2), sampling=sampling, done=whole[:5], on_record=new.append)
    assert len(new) == len(whole) - 5 and resumed[:5] == whole[:5]  # the earlier runs kept, not run again

    def same(record):
        return dataclasses.replace(record, wall_s=0.0)  # all but the real seconds

    assert [same(record) for record in resumed] == [same(record) for record in whole]
    assert [same(record) for record in new] == [same(record) for record in whole[5:]]


def test_the_parts_of_a_sharded_benchmark_together_give_the_whole_and_each_run_once():
    sampling = Sampling(temperature=0.7, seeds=(100, 101), tool_fault_rate=0.2)
    whole = run_sampled(scripted_model(ScriptedServer()), task_bank(3), sampling=sampling)
    first, second = [], []
    run_sampled(scripted_model(ScriptedServer()), task_bank(3), sampling=sampling, on_record=first.append, shard=(0, 2))
    kept = run_sampled(
        scripted_model(ScriptedServer()), task_bank(3), sampling=sampling, done=first, on_record=second.append,
        shard=(1, 2),
    )  # fmt: skip
    assert first and second and len(first) + len(second) == len(whole)
    assert {(r.task, r.seed) for r in first}.isdisjoint({(r.task, r.seed) for r in second})
    for part in (first, second):  # every agent of a task at a seed in the same part
        assert all(sum(r.task == t and r.seed == s for r in part) == len(SAMPLED_AGENTS) for t, s in
                   {(r.task, r.seed) for r in part})  # fmt: skip

    def same(record):
        return dataclasses.replace(record, wall_s=0.0)

    assert [same(record) for record in kept] == [same(record) for record in whole]  # the second part saw the first's
    with pytest.raises(ValueError, match="shard 2 of 2"):
        run_sampled(scripted_model(ScriptedServer()), task_bank(1), sampling=sampling, shard=(2, 2))
