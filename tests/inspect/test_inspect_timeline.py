"""`reinloop inspect`'s timeline, read from the history of threads run with a scripted model: rounds, calls,
guard events, the path through the graph and where the run stopped."""

from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from reinloop import AgentConfig, build_agent, resume
from reinloop.graph import CHECK_FINISH, CIRCUIT_BREAK, DECIDE, VALIDATE_ARGS, agent_topology
from reinloop.inspect import reading
from reinloop.inspect.reading import Histories, view
from reinloop.inspect.timeline import END, timeline
from reinloop.testing import ScriptedChatModel, json_action, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def echo(text: str) -> str:
    """Say `text` back."""
    return text


def history(agent, thread="t"):
    return list(agent_topology(agent.checkpointer).get_state_history({"configurable": {"thread_id": thread}}))[::-1]


def agent_with(replies, tools=(add, echo), **config):
    model = ScriptedChatModel(replies=replies)
    return build_agent(model, list(tools), checkpointer=InMemorySaver(), config=AgentConfig(**config))


def test_a_break_reads_as_its_rounds_calls_and_finish_with_the_stopping_node():
    agent = agent_with([tool_call("add", {"a": 1, "b": 2}), tool_call("add", {"a": 1, "b": "x"})], max_iterations=2)
    assert agent.invoke({"task": "add"}, {"configurable": {"thread_id": "t"}})["finish_reason"] == "max_iterations"
    read = timeline(history(agent))
    task, first, second = read.rounds
    assert [event.kind for event in task.events] == ["task"] and task.events[0].text == "add"
    assert (first.number, [(c.name, c.args, c.outcome, c.result) for c in first.calls]) == (
        1, [("add", '{"a": 1, "b": 2}', "ok", "3")]
    )  # fmt: skip
    (invalid,) = second.calls
    assert (invalid.outcome, invalid.failed) == (
        "invalid_args",
        True,
    ) and "Input should be a valid integer" in invalid.note
    finish = second.events[-1]
    assert (finish.kind, finish.reason) == ("finish", "max_iterations")
    assert finish.text.startswith("Stopped: no final answer after 2 rounds") and "reinloop.resume" not in finish.text
    assert first.tokens > 0 and second.tokens > 0
    assert read.stopped_at == CIRCUIT_BREAK
    assert {(CHECK_FINISH, CIRCUIT_BREAK), (CHECK_FINISH, DECIDE), ("__start__", DECIDE)} <= read.edges


def test_an_answer_after_a_resume_reads_as_the_resume_its_hint_and_the_answer():
    agent = agent_with([tool_call("add", {"a": 1, "b": 2}), "It is 3."], max_iterations=1)
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"task": "add"}, config)
    resume(agent, config, extra_iterations=2, hint="Just answer.")
    read = timeline(history(agent))
    resumed = next(r for r in read.rounds if r.events and r.events[0].kind == "resumed")
    assert "a fresh budget of 2 rounds" in resumed.events[0].text and "Just answer." in resumed.events[0].text
    last = read.rounds[-1]
    assert [event.kind for event in last.events] == ["answer", "finish"] and last.events[-1].reason == "answered"
    assert read.stopped_at == END and (CHECK_FINISH, END) in read.edges


def test_a_history_read_again_as_its_thread_moves_on_reads_as_a_fresh_read(monkeypatch):
    agent = agent_with([tool_call("add", {"a": 1, "b": 2}), "It is 3."], max_iterations=1)
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"task": "add"}, config)
    histories = Histories()
    assert view(agent.checkpointer, "t", histories).status.finish_reason == "max_iterations"
    resume(agent, config, extra_iterations=2)
    reads, since = [], reading._since

    def counted_since(*args):
        new, found = since(*args)
        reads.append((len(new), found))
        return new, found

    monkeypatch.setattr(reading, "_since", counted_since)
    again, fresh = view(agent.checkpointer, "t", histories), view(agent.checkpointer, "t")
    (new, found), (whole, _) = reads
    assert found and new < whole  # the second read only what is new since the first; the fresh one all of it
    assert again.timeline == fresh.timeline and again.status == fresh.status
    assert again.status.finish_reason == "answered" and not again.earlier


def test_a_long_thread_s_page_reads_its_latest_checkpoints_only():
    agent = agent_with([tool_call("add", {"a": n, "b": 1}) for n in range(6)], max_iterations=6)
    agent.invoke({"task": "add"}, {"configurable": {"thread_id": "t"}})
    histories = Histories(window=12)
    shown = view(agent.checkpointer, "t", histories)
    assert shown.earlier and len(histories.snapshots(agent_topology(agent.checkpointer), "t")) == 12
    assert shown.status.finish_reason == "max_iterations" and shown.timeline.stopped_at == "circuit_break"
    whole = view(agent.checkpointer, "t")
    # The rounds read whole have their own tokens; the first, read in part, none of the earlier rounds'.
    (first, partial), *rest = shown.tokens
    assert not whole.earlier and whole.tokens[-len(rest) :] == rest and partial <= dict(whole.tokens)[first]


def test_answers_from_cache_and_parse_retries_are_events_of_their_round():
    replies = ["not json", json_action("echo", {"text": "hi"}), json_action("echo", {"text": "hi"}),
               json_action("final_answer", "hi")]  # fmt: skip
    agent = agent_with(replies, protocol="json")
    agent.invoke({"task": "echo"}, {"configurable": {"thread_id": "t"}})
    rounds = [r for r in timeline(history(agent)).rounds if r.number]
    assert "retry" in [event.kind for event in rounds[0].events]
    assert [call.outcome for call in rounds[1].calls] == ["cached"]
    assert "cached" in [event.kind for event in rounds[1].events]


def test_a_call_waiting_for_approval_stops_at_validate_args():
    agent = build_agent(ScriptedChatModel(replies=[tool_call("echo", {"text": "hi"})]), [echo],
                        checkpointer=InMemorySaver(), approve=["echo"])  # fmt: skip
    agent.invoke({"task": "echo"}, {"configurable": {"thread_id": "t"}})
    read = timeline(history(agent))
    assert read.stopped_at == VALIDATE_ARGS
    assert [call.outcome for call in read.rounds[-1].calls] == ["waiting"]


def test_a_tool_retried_in_place_is_an_event():
    failures = iter([RuntimeError("flaky")])

    @tool
    def flaky(text: str) -> str:
        """Fail once, then say `text` back."""
        if (failure := next(failures, None)) is not None:
            raise failure
        return text

    flaky.metadata = {"reinloop": {"retryable": True}}  # an echo: safe to repeat
    agent = agent_with([tool_call("flaky", {"text": "hi"}), "done"], tools=[flaky], tool_backoff_s=0)
    agent.invoke({"task": "flaky"}, {"configurable": {"thread_id": "t"}})
    first = next(r for r in timeline(history(agent)).rounds if r.number == 1)
    assert first.calls[0].attempts == 2 and "retried" in [event.kind for event in first.events]


def test_a_call_that_ran_and_failed_shows_the_error_kind_of_its_run():
    from langchain_core.tools import ToolException

    @tool
    def broken(text: str) -> str:
        """Always fail."""
        raise ToolException(f"cannot say {text}")

    agent = agent_with([tool_call("broken", {"text": "hi"}), "gave up"], tools=[broken])
    agent.invoke({"task": "break"}, {"configurable": {"thread_id": "t"}})
    (call,) = next(r for r in timeline(history(agent)).rounds if r.number == 1).calls
    assert (call.outcome, call.failed, call.attempts) == ("tool_error", True, 1) and "cannot say hi" in call.result


def test_an_open_circuit_a_reflection_turn_and_refused_calls_are_events():
    from langchain_core.tools import ToolException

    @tool
    def broken(text: str) -> str:
        """Always fail."""
        raise ToolException(f"cannot say {text}")

    replies = [tool_call("broken", {"text": str(n)}) for n in range(4)] + ["gave up"]
    agent = agent_with(replies, tools=[broken], error_threshold=3)
    agent.invoke({"task": "break"}, {"configurable": {"thread_id": "t"}})
    rounds = {r.number: r for r in timeline(history(agent)).rounds}
    third = [event.kind for event in rounds[3].events]
    assert "circuit" in third and "reflection" in third
    assert [call.outcome for call in rounds[4].calls] == ["circuit_open"]
    assert "refused" in [event.kind for event in rounds[4].events]
    assert [(event.kind, event.reason) for event in rounds[5].events] == [("answer", None), ("finish", "answered")]
