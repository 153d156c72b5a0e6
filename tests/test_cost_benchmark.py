"""benchmarks/cost.py: its cache accounting on hand-built token blocks, and its core on a 3-round run."""

from __future__ import annotations

import json

import pytest

from tests.conftest import benchmark_script

cost = benchmark_script("cost.py", "cost_benchmark")


def block(start: int, length: int) -> tuple[int, ...]:
    return tuple(range(start, start + length))


TOOLS = block(0, 600)
TASK = block(10_000, 300)
STEP = block(20_000, 200)
OTHER = block(30_000, 250)


@pytest.mark.parametrize(
    ("shared", "cached"),
    [(1_100, 1_024), (1_000, 0), (1_023, 0), (1_024, 1_024), (1_300, 1_280), (2_047, 1_920)],
    ids=["1100-counts-1024", "1000-counts-0", "just-under", "exactly-1024", "1300-counts-1280", "2047-counts-1920"],
)
def test_openai_caches_a_shared_prefix_from_1024_tokens_in_steps_of_128(shared, cached):
    first = [block(0, shared), (900_001,)]
    second = [block(0, shared), (900_002,), STEP]
    assert cost.openai_cached([first, second]) == [0, cached]


def test_a_prefix_shared_inside_a_block_counts_token_by_token():
    earlier = [TOOLS, block(50_000, 900)]
    later = [TOOLS, block(50_000, 500) + block(70_000, 400)]
    assert cost.longest_earlier_prefixes([earlier, later]) == [0, 1_100]
    assert cost.openai_cached([earlier, later]) == [0, 1_024]
    assert cost.llama_reused([earlier, later]) == [0, 1_100]


def test_openai_reuses_any_earlier_request_and_llama_cpp_only_the_previous_one():
    long_task = block(10_000, 1_500)
    requests = [[TOOLS, long_task], [OTHER], [TOOLS, long_task, STEP]]
    assert cost.openai_cached(requests) == [0, 0, 2_048]  # 2,100 shared with the first, in steps of 128
    assert cost.llama_reused(requests) == [0, 0, 0]


def test_anthropic_reads_only_whole_prompts_written_before_and_writes_the_rest():
    first = [TOOLS, TASK]  # writes 900
    second = [TOOLS, TASK, STEP]  # reads the first's 900, writes 200
    slid = [TOOLS, OTHER, STEP]  # TOOLS alone was never written: reads nothing
    grown = [TOOLS, TASK, STEP, OTHER]  # reads the second's whole prompt, 1,100
    branched = [TOOLS, TASK, OTHER]  # the longest written prefix is the first's, 900
    partial = [TOOLS, TASK[:150] + STEP]  # a prefix that ends inside a block is never read
    assert cost.anthropic_read([first, second, slid, grown, branched, partial]) == [0, 900, 0, 1_100, 900, 0]


def test_a_written_prefix_further_back_than_the_lookback_is_not_found():
    first = [TOOLS, TASK]
    later = [TOOLS, TASK, STEP, OTHER, STEP[:100]]
    weights = [[5, 1], [5, 1, 2, 1, 1]]  # content blocks: the later prompt has 4 after the first's end
    assert cost.anthropic_read([first, later], lookback=4, weights=weights) == [0, 900]
    assert cost.anthropic_read([first, later], lookback=3, weights=weights) == [0, 0]


def test_each_rule_prices_cached_reads_at_a_tenth_writes_at_1_25_and_output_at_4():
    cached = {"openai": 8_000, "anthropic": 6_000, "anthropic, lookback": 2_000, "llama.cpp": 9_000}
    figures = cost.Figures(decisions=2, summaries=0, prompt=10_000, largest=6_000, output=100, cached=cached)
    assert figures.cost("openai") == pytest.approx(2_000 + 800 + 400)
    assert figures.cost("anthropic") == pytest.approx(600 + 1.25 * 4_000 + 400)
    assert figures.cost("anthropic, lookback") == pytest.approx(200 + 1.25 * 8_000 + 400)
    assert figures.cost("llama.cpp") == pytest.approx(1_000 + 900 + 400)
    assert figures.share("openai") == pytest.approx(0.8)


def test_the_workload_never_repeats_a_call_and_its_observations_are_realistic_sizes():
    steps = [cost.scripted_step(number) for number in range(200)]
    assert len({(step.tool, json.dumps(step.args, sort_keys=True)) for step in steps}) == 200
    sizes = [len(cost.observation(step.tool, step.args)) for step in steps]
    assert min(sizes) >= 300 and max(sizes) <= 2_000
    assert len({cost.call_id(number) for number in range(200)}) == 200


def test_the_40_tools_weigh_about_6000_tokens():
    with cost.RecordingServer() as server:
        schemas = cost._model(server, cost.AGENT_MODEL).bind_tools(cost.toolset(40)).kwargs["tools"]
    tokens = len(cost.Tokeniser().block(json.dumps(schemas, separators=(",", ":"))))
    assert 5_000 <= tokens <= 7_000


def test_three_rounds_with_five_tools_record_every_request_as_sent():
    with cost.RecordingServer() as server:
        runs = {agent: cost.measure(server, agent, 5, 3) for agent in cost.AGENTS}
        again = cost.measure(server, "reinloop", 5, 3)
    assert again.figures == runs["reinloop"].figures  # deterministic: one run per configuration suffices
    for run in runs.values():
        figures = run.figures
        assert (figures.decisions, figures.summaries) == (4, 0)
        assert figures.breaks == {"appended": 3}  # three rounds fit every agent's window: the history only grows
        assert 0 < figures.cached["llama.cpp"] < figures.prompt
        assert figures.largest < figures.prompt
    # Without summaries the two create_agent runs send the same requests.
    assert runs["create_agent"].figures == runs["create_agent + summarization"].figures
    # reinloop cuts observations to 500 characters, create_agent sends them whole.
    assert runs["reinloop"].figures.prompt < runs["create_agent"].figures.prompt


def test_with_40_tools_max_tools_sends_one_pick_then_only_the_picked_schemas():
    with cost.RecordingServer() as server:
        whole = cost.measure(server, "reinloop", 40, 3)
        subset = cost.measure(server, cost.SUBSET_AGENT, 40, 3)
        requests = list(server.requests)
    pick, *decisions = requests
    assert pick.kind == "selection" and "tools" not in pick.labels  # a plain question, no schemas
    assert [request.kind for request in decisions] == ["decision"] * 4
    for request in decisions:
        schemas = json.loads(cost.ENCODING.decode(list(request.blocks[0][:-1])))
        assert sorted(schema["function"]["name"] for schema in schemas) == sorted(cost.SELECTION.split(", "))
    assert subset.figures.selections == 1 and subset.figures.requests == 5
    assert subset.figures.largest < whole.figures.largest / 2  # 10 schemas instead of 40
