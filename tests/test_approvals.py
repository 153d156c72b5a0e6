"""Approvals: a person approves, edits or rejects a call before it runs (`reinloop.approvals`)."""

import asyncio
import threading
import time

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import is_invalid_resume
from langgraph.types import Command
from pydantic import ValidationError

from reinloop import AgentConfig, ConfigurationError, ToolRegistry, build_agent, lease
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from tests.cli.test_cli import cli, home, run_args, server  # noqa: F401 - the CLI tests' fixtures and helpers
from tests.conftest import add, new_thread

APPROVE = {"action": "approve"}


class Outbox:
    """A `send` tool that records every message it sends; optionally not idempotent, optionally hanging."""

    def __init__(self, *, idempotent: bool = True) -> None:
        self.sent: list[str] = []
        self.hang_on: str | None = None
        self.entered, self.released = threading.Event(), threading.Event()

        @tool
        def send(text: str) -> str:
            """Send a message."""
            self.sent.append(text)
            if text == self.hang_on:
                self.entered.set()
                self.released.wait(60)  # the process "dies" here: the test resumes the thread meanwhile
            return f"sent {text!r}"

        send.metadata = {"reinloop": {"idempotent": idempotent}}
        self.tool = send


@pytest.fixture
def outbox():
    box = Outbox()
    yield box
    box.released.set()


def agent_with(replies, tools, **kwargs):
    model = ScriptedChatModel(replies=list(replies))
    saver = kwargs.pop("checkpointer", InMemorySaver())
    config = AgentConfig(tool_timeout_s=90)
    return build_agent(model, tools, config=config, checkpointer=saver, **kwargs), model


def results(model, call_index):
    """The tool results the model saw in its `call_index`-th prompt, by call id."""
    return {m.tool_call_id: m for m in model.calls[call_index].messages if isinstance(m, ToolMessage)}


def test_approve_runs_the_call_after_the_run_stopped_with_the_call_and_the_models_thought(outbox):
    reply = tool_call("send", {"text": "hello"}, id="c1", content="The user asked me to greet Bob.")
    agent, _ = agent_with([reply, "sent"], [outbox.tool], approve=["send"])
    thread = new_thread()

    stopped = agent.invoke({"task": "greet Bob"}, thread)
    (waiting,) = stopped["__interrupt__"]
    assert outbox.sent == []  # nothing runs before the answer
    assert waiting.value["type"] == "tool_approval"
    call = (waiting.value["tool_call_id"], waiting.value["name"], waiting.value["args"])
    assert call == ("c1", "send", {"text": "hello"})
    assert waiting.value["thought"] == "The user asked me to greet Bob."
    assert "Tool: send" in waiting.value["description"] and "greet Bob" in waiting.value["description"]
    assert agent.get_state(thread).next == ("validate_args",)

    done = agent.invoke(Command(resume=APPROVE), thread)
    assert (done["finish_reason"], outbox.sent) == ("answered", ["hello"])


def test_an_edit_runs_the_call_with_the_persons_arguments_and_the_model_is_told(outbox):
    agent, model = agent_with([tool_call("send", {"text": "helo"}, id="c1"), "sent"], [outbox.tool], approve=["send"])
    thread = new_thread()
    agent.invoke({"task": "greet"}, thread)
    done = agent.invoke(Command(resume={"action": "edit", "args": {"text": "hello"}}), thread)
    assert (done["finish_reason"], outbox.sent) == ("answered", ["hello"])
    observation = results(model, 1)["c1"].content
    assert observation.startswith("Note: the user changed this call") and '{"text": "hello"}' in observation
    assert "sent 'hello'" in observation


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"action": "edit", "args": {"text": 3}}, "text: Input should be a valid string"),
        ({"action": "edit", "args": {"txt": "hi"}}, "txt: unexpected argument"),
        ({"action": "edit"}, 'an edit needs "args"'),
        ({"type": "edit", "edited_action": {"name": "add", "args": {}}}, "cannot call another tool"),
        ({"action": "maybe"}, "action must be one of 'approve', 'edit', 'reject'"),
        ({"type": "respond", "message": "hi"}, '"respond" is not supported'),
        ({"action": "reject", "message": "no"}, "takes only 'reason'"),
        ({"decisions": [APPROVE, APPROVE]}, "exactly one decision"),
        ("approve", "expected an object"),
        ({"yes": True}, 'no "action"'),
        ({"action": "edit", "args": {"text": 10**30}}, "64 bits"),
    ],
    ids=["edit-wrong-type", "edit-unknown-arg", "edit-no-args", "edit-other-tool", "unknown-action", "respond",
         "wrong-key", "two-decisions", "not-an-object", "no-action", "unstorable"],
)  # fmt: skip
def test_an_invalid_answer_is_a_clear_error_and_the_same_call_is_asked_again(outbox, answer, problem):
    agent, _ = agent_with([tool_call("send", {"text": "hi"}, id="c1"), "sent"], [outbox.tool], approve=["send"])
    thread = new_thread()
    (first,) = agent.invoke({"task": "greet"}, thread)["__interrupt__"]

    with pytest.raises(ValidationError, match="invalid answer to the approval of the 'send' call") as raised:
        agent.invoke(Command(resume=answer), thread)
    assert problem in str(raised.value) and is_invalid_resume(raised.value)
    assert outbox.sent == []
    (still,) = agent.get_state(thread).interrupts
    assert still.id == first.id  # nothing was saved: the same interrupt waits

    done = agent.invoke(Command(resume={"action": "edit", "args": {"text": "fixed"}}), thread)
    assert (done["finish_reason"], outbox.sent) == ("answered", ["fixed"])


def test_a_rejection_does_not_run_the_call_and_the_model_sees_the_reason(outbox):
    script = [tool_call("send", {"text": "spam"}, id="c1"), "I did not send it."]
    agent, model = agent_with(script, [outbox.tool], approve=["send"])
    thread = new_thread()
    agent.invoke({"task": "send spam"}, thread)
    done = agent.invoke(Command(resume={"action": "reject", "reason": "we never send spam"}), thread)
    assert outbox.sent == [] and done["finish_reason"] == "answered"
    observation = results(model, 1)["c1"]
    assert observation.status == "error" and "rejected" in observation.content
    assert "we never send spam" in observation.content
    saved = [check for snapshot in agent.get_state_history(thread) for check in snapshot.values.get("checks", [])]
    assert {(check["error_kind"], check.get("review")) for check in saved} == {("rejected", "rejected")}


def test_langchain_hitl_decisions_and_answers_keyed_by_interrupt_id_are_understood(outbox):
    calls = parallel_calls([("send", {"text": "a"}), ("send", {"text": "b"}), ("send", {"text": "c"})])
    agent, model = agent_with([calls, "done"], [outbox.tool], approve=["send"])
    thread = new_thread()
    (first,) = agent.invoke({"task": "send"}, thread)["__interrupt__"]
    (second,) = agent.invoke(Command(resume={first.id: {"decisions": [{"type": "approve"}]}}), thread)["__interrupt__"]
    edit = {"type": "edit", "edited_action": {"name": "send", "args": {"text": "B"}}}
    agent.invoke(Command(resume={second.id: edit}), thread)
    agent.invoke(Command(resume={"type": "reject", "message": "not c"}), thread)
    assert sorted(outbox.sent) == ["B", "a"]
    assert "not c" in list(results(model, 1).values())[2].content


def test_parallel_calls_are_asked_one_by_one_in_order_and_none_runs_before_all_are_answered(outbox):
    calls = parallel_calls([("send", {"text": "first"}), ("add", {"a": 1, "b": 2}), ("send", {"text": "second"})],
                           ids=["c1", "c2", "c3"])  # fmt: skip
    agent, model = agent_with([calls, "done"], [outbox.tool, add], approve=["send"])
    thread = new_thread()

    (first,) = agent.invoke({"task": "two messages and a sum"}, thread)["__interrupt__"]
    assert first.value["tool_call_id"] == "c1"
    (second,) = agent.invoke(Command(resume={"action": "reject", "reason": "not this one"}), thread)["__interrupt__"]
    assert second.value["tool_call_id"] == "c3" and second.id != first.id  # add needs no approval
    assert outbox.sent == []  # nothing has run, add included
    assert not results(model, 0)

    done = agent.invoke(Command(resume=APPROVE), thread)
    assert outbox.sent == ["second"] and done["finish_reason"] == "answered"
    seen = results(model, 1)
    assert "not this one" in seen["c1"].content and seen["c2"].content == "3" and "sent 'second'" in seen["c3"].content


def test_an_approved_call_of_a_tool_that_is_not_idempotent_runs_and_a_finished_call_never_runs_again():
    box = Outbox(idempotent=False)
    script = [tool_call("send", {"text": "one"}), tool_call("send", {"text": "two"}), "done"]
    agent, model = agent_with(script, [box.tool], approve=["send"])
    thread = new_thread()
    agent.invoke({"task": "two messages"}, thread)
    agent.invoke(Command(resume=APPROVE), thread)  # "one" runs; "two" waits
    assert box.sent == ["one"]
    done = agent.invoke(Command(resume=APPROVE), thread)
    # An approval's resume is not a crash resume: the non-idempotent calls ran (no unknown_outcome), once each.
    assert box.sent == ["one", "two"] and done["finish_reason"] == "answered"
    assert not done.get("in_doubt")
    assert all(message.status == "success" for message in results(model, 2).values())


def test_a_crash_mid_call_after_an_approval_still_fails_closed_and_reruns_nothing_that_finished():
    box = Outbox(idempotent=False)
    box.hang_on = "two"
    calls = parallel_calls([("send", {"text": "two"}), ("add", {"a": 1, "b": 1})], ids=["c1", "c2"])
    saver = InMemorySaver()
    added = []

    @tool("add")
    def counted_add(a: int, b: int) -> int:
        """Add two integers."""
        added.append((a, b))
        return a + b

    # A third reply for the "dead" run, which goes on once released at the end.
    script = [calls, "done", "done"]
    agent, model = agent_with(script, [box.tool, counted_add], checkpointer=saver, approve=["send"])
    thread = new_thread()
    agent.invoke({"task": "send and add"}, thread)
    # The approved run "dies" inside send: its thread hangs there while the thread is resumed elsewhere.
    crashed = threading.Thread(target=agent.invoke, args=(Command(resume=APPROVE), thread), daemon=True)
    crashed.start()
    try:
        assert box.entered.wait(60)
        deadline = time.monotonic() + 60
        while not _saved_outcome(saver, thread, "add"):  # add finished and was saved before the "crash"
            assert time.monotonic() < deadline, "add's outcome was never saved"
            time.sleep(0.01)

        # A dead process's leases die with it; this one's "dead" run still holds its thread's.
        lease._local_held.clear()
        done = agent.invoke(None, thread)  # the crash resume
    finally:
        box.released.set()
        crashed.join(60)
    assert box.sent == ["two"] and added == [(1, 1)]  # neither ran again, and nobody was asked again
    assert done["finish_reason"] == "answered"
    seen = results(model, 1)
    assert "unknown" in seen["c1"].content and seen["c2"].content == "2"
    assert [call["name"] for call in done["in_doubt"]] == ["send"]


def _saved_outcome(saver, thread, name):
    found = saver.get_tuple(thread)
    return any(
        channel == "tool_results" and any(outcome.get("name") == name for outcome in value)
        for _, channel, value in (found.pending_writes if found else [])
        if isinstance(value, list)
    )


def test_approvals_work_under_ainvoke():
    box = Outbox(idempotent=False)
    script = [parallel_calls([("send", {"text": "a"}), ("send", {"text": "b"})], ids=["c1", "c2"]), "done"]
    agent, model = agent_with(script, [box.tool], approve=["send"])
    thread = new_thread()

    async def run():
        first = await agent.ainvoke({"task": "send"}, thread)
        second = await agent.ainvoke(Command(resume={"action": "edit", "args": {"text": "A"}}), thread)
        with pytest.raises(ValidationError, match="invalid answer"):
            await agent.ainvoke(Command(resume={"action": "edit", "args": {}}), thread)
        done = await agent.ainvoke(Command(resume={"action": "reject", "reason": "only one"}), thread)
        return first, second, done

    first, second, done = asyncio.run(run())
    asked = [w.value["args"] for w in (*first["__interrupt__"], *second["__interrupt__"])]
    assert asked == [{"text": "a"}, {"text": "b"}]
    assert box.sent == ["A"] and done["finish_reason"] == "answered" and not done.get("in_doubt")
    assert "only one" in results(model, 1)["c2"].content


def test_a_tool_can_ask_for_approval_itself(outbox):
    registry = ToolRegistry()
    registry.add(outbox.tool, approve=True)
    agent, _ = agent_with([tool_call("send", {"text": "x"}), "done"], registry)
    assert agent.invoke({"task": "send"}, new_thread())["__interrupt__"]

    declared = Outbox()
    declared.tool.metadata = {"reinloop": {"approve": True}}
    agent, _ = agent_with([tool_call("send", {"text": "x"}), "done"], [declared.tool])
    assert agent.invoke({"task": "send"}, new_thread())["__interrupt__"]


def test_approval_settings_that_cannot_work_are_refused_at_build_time(outbox):
    model = ScriptedChatModel(replies=["done"])
    with pytest.raises(ConfigurationError, match=r"'send' wait for a person's approval.*give build_agent a checkpoint"):
        build_agent(model, [outbox.tool], approve=["send"])
    declared = Outbox()
    declared.tool.metadata = {"reinloop": {"approve": True}}
    with pytest.raises(ConfigurationError, match="checkpointer"):
        build_agent(model, [declared.tool])
    with pytest.raises(ConfigurationError, match=r"tools the agent does not have: 'sned'; its tools are \[send\]"):
        build_agent(model, [outbox.tool], approve=["sned"], checkpointer=InMemorySaver())
    with pytest.raises(ConfigurationError, match="a list of tool names"):
        build_agent(model, [outbox.tool], approve="send", checkpointer=InMemorySaver())
    with pytest.raises(ConfigurationError, match="checkpointer"):
        build_agent(model, [outbox.tool], approve=["send"], checkpointer=False)  # LangGraph's "never one"


def test_an_agent_given_its_checkpointer_at_run_time_asks_inside_a_parent_graph(outbox):
    """``checkpointer=True``: the agent as a subgraph uses its parent's saver, and its interrupt stops the parent."""
    from langgraph.graph import START, StateGraph

    from reinloop import AgentState

    model = ScriptedChatModel(replies=[tool_call("send", {"text": "hi"}), "sent"])
    agent = build_agent(model, [outbox.tool], approve=["send"], checkpointer=True)
    parent = StateGraph(AgentState)
    parent.add_node("agent", agent)
    parent.add_edge(START, "agent")
    app, thread = parent.compile(checkpointer=InMemorySaver()), new_thread()

    (waiting,) = app.invoke({"task": "say hi"}, thread)["__interrupt__"]
    assert (waiting.value["name"], outbox.sent) == ("send", [])
    done = app.invoke(Command(resume=APPROVE), thread)
    assert (done["final_answer"], outbox.sent) == ("sent", ["hi"])
    with pytest.raises(RuntimeError, match="checkpointer=True cannot be used for root graphs"):
        agent.invoke({"task": "say hi"}, new_thread())


# The command line ----------------------------------------------------------------------------------------


def test_the_cli_asks_on_the_terminal_and_edits_after_a_refused_answer(server, home):  # noqa: F811 - pytest fixtures
    server.replies = [{"tool": "file_write", "args": {"path": "a.txt", "content": "hi"}}, "written"]
    answers = 'x\ne\n{"path": 3}\ne\n{"path": "b.txt", "content": "edited"}\n'
    done = cli("run", "Write a note.", *run_args(server, "--thread", "t1"), home=home, stdin=answers)
    assert done.returncode == 0, done.stderr
    assert 'approval file_write({"path": "a.txt", "content": "hi"})' in done.stdout
    assert "answer a (approve), e (edit) or r (reject)" in done.stdout
    assert "not accepted: the edited arguments are invalid: path: Input should be a valid string" in done.stdout
    assert (home / "ws" / "b.txt").read_text() == "edited" and not (home / "ws" / "a.txt").exists()


def test_the_cli_rejects_with_a_reason_and_resume_asks_again_after_a_closed_input(server, home):  # noqa: F811 - pytest fixtures
    server.replies = [{"tool": "db_insert", "args": {"table": "notes", "values": {"title": "t", "body": "b"}}}, "ok"]
    stopped = cli("run", "Save a note.", *run_args(server, "--thread", "t2"), home=home, stdin="")
    assert stopped.returncode == 2
    assert "no answer on the terminal for the 'db_insert' call" in stopped.stderr
    assert "reinloop resume t2" in stopped.stderr

    done = cli("resume", "t2", "--no-memory", home=home, stdin="r\nnot in the database\n")
    assert done.returncode == 0, done.stderr
    assert "approval db_insert" in done.stdout
    sent = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "not in the database" in sent[0]["content"]


def test_the_cli_yes_approves_every_call_and_approve_names_the_tools(server, home):  # noqa: F811 - pytest fixtures
    server.replies = [{"tool": "file_write", "args": {"path": "a.txt", "content": "hi"}}, "written"]
    done = cli("run", "Write a note.", *run_args(server, "--yes"), home=home, stdin="")
    assert done.returncode == 0, done.stderr
    assert "approved file_write" in done.stdout and (home / "ws" / "a.txt").read_text() == "hi"

    server.replies = [{"tool": "calculator", "args": {"expression": "2 + 3"}}, "5"]
    done = cli("run", "2 + 3?", *run_args(server, "--approve", "calculator"), home=home, stdin="a\n")
    assert done.returncode == 0, done.stderr
    assert 'approval calculator({"expression": "2 + 3"})' in done.stdout and "✓ calculator: 5" in done.stdout

    help_text = cli("run", "--help", home=home).stdout
    assert "--approve TOOL" in help_text and "--yes" in help_text


# invoke gives LangGraph's v1 result through its cheaper v2 run --------------------------------------------


def _runs_of_a_waiting_call(box: Outbox, asynchronous: bool) -> list:
    script = [parallel_calls([("send", {"text": "a"}), ("send", {"text": "b"})], ids=["c1", "c2"]), "done"]
    agent, _ = agent_with(script, [box.tool], approve=["send"])
    thread = {"configurable": {"thread_id": "same"}}
    inputs = [{"task": "send"}, Command(resume=APPROVE), Command(resume={"action": "reject", "reason": "no"})]
    if asynchronous:

        async def run() -> list:
            return [await agent.ainvoke(given, thread) for given in inputs]

        return asyncio.run(run())
    return [agent.invoke(given, thread) for given in inputs]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_invoke_returns_what_langgraph_s_v1_invoke_returns_without_mapping_updates(asynchronous, monkeypatch):
    import langgraph.pregel._loop as loop

    from reinloop import compiled

    mapped: list[int] = []
    original = loop.map_output_updates

    def counted(*args, **kwargs):
        mapped.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "map_output_updates", counted)
    fast = _runs_of_a_waiting_call(Outbox(), asynchronous)
    assert mapped == []  # no step's updates were mapped, only values
    with monkeypatch.context() as langgraph_s:
        langgraph_s.setattr(compiled._Agent, "_values_only", lambda self, kwargs: False)
        v1 = _runs_of_a_waiting_call(Outbox(), asynchronous)
    assert mapped  # LangGraph's v1 invoke maps every step's updates
    assert [set(run) for run in fast] == [set(run) for run in v1]
    for ours, theirs in zip(fast, v1, strict=True):
        assert isinstance(ours.get("__interrupt__", []), list)
        assert [w.value for w in ours.get("__interrupt__", [])] == [w.value for w in theirs.get("__interrupt__", [])]
        assert {k: v for k, v in ours.items() if k not in ("__interrupt__", "messages")} == {
            k: v for k, v in theirs.items() if k not in ("__interrupt__", "messages")
        }
        assert [m.content for m in ours["messages"]] == [m.content for m in theirs["messages"]]
    assert len(fast[0]["__interrupt__"]) == 1 and fast[-1]["finish_reason"] == "answered"
