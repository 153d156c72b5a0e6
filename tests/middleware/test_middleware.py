"""LangChain middleware inside reinloop's nodes (`reinloop.middleware`): every "works" row of the middleware
table of docs/middleware.md, on LangChain's shipped middleware and the decorator forms, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    LLMToolSelectorMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    PIIMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
    after_agent,
    after_model,
    before_agent,
    before_model,
    dynamic_prompt,
    wrap_model_call,
    wrap_tool_call,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field
from typing_extensions import TypedDict

from reinloop import AgentConfig, build_agent
from reinloop.cli import EXIT_CODES
from reinloop.errors import ConfigurationError
from reinloop.testing import ScriptedChatModel, parallel_calls, tool_call
from tests.conftest import add, explode, new_thread


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


THREE_ADDS = [tool_call("add", {"a": 1, "b": n}) for n in range(3)]


def run(middleware: list[Any], replies: list[Any], *, sync: bool = True, task: str = "add", **build: Any) -> Any:
    model = build.pop("model", None) or ScriptedChatModel(replies=replies)
    config = build.pop("config", AgentConfig(max_replans=0))
    agent = build_agent(model, [add, lookup, explode], config=config, middleware=middleware, **build)
    thread = new_thread()
    invoke = agent.invoke if sync else lambda *a: asyncio.run(agent.ainvoke(*a))
    return invoke({"task": task}, thread), model


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [message for message in result["messages"] if isinstance(message, ToolMessage)]


# ModelCallLimitMiddleware: before_model's jump to the end, after_model's count in its own state keys --------


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_model_call_limit_ends_a_run_after_its_run_limit_with_the_middleware_reason(sync):
    result, model = run([ModelCallLimitMiddleware(run_limit=2)], [*THREE_ADDS, "never sent"], sync=sync)
    assert len(model.calls) == 2
    assert result["finish_reason"] == "middleware" and EXIT_CODES["middleware"] == 9
    assert result["messages"][-1].content.startswith("Model call limits exceeded: run limit (2/2)")
    assert len(tool_messages(result)) == 2  # both calls the model made ran; the third decision never came


def test_model_call_limit_counts_a_thread_across_runs_in_its_saved_state_key():
    model = ScriptedChatModel(replies=["one", "two", "never sent"])
    agent = build_agent(
        model, [add], middleware=[ModelCallLimitMiddleware(thread_limit=2)], checkpointer=InMemorySaver()
    )
    thread = new_thread()
    assert agent.invoke({"task": "a"}, thread)["final_answer"] == "one"
    second = agent.invoke({"task": "b"}, thread)
    assert second["final_answer"] == "two" and agent.get_state(thread).values["thread_model_call_count"] == 2
    assert agent.invoke({"task": "c"}, thread)["finish_reason"] == "middleware"
    assert len(model.calls) == 2


# ToolCallLimitMiddleware: an after_model hook answers a call with its own ToolMessage ---------------------


def test_tool_call_limit_answers_a_call_over_its_limit_and_the_call_does_not_run():
    limit = ToolCallLimitMiddleware(tool_name="lookup", run_limit=1)
    replies = [tool_call("lookup", {"key": "k"}), tool_call("lookup", {"key": "j"}), "done"]
    result, _ = run([limit], replies)
    first, second = tool_messages(result)
    assert first.content == "value of k" and first.status == "success"
    assert second.status == "error" and "Tool call limit exceeded" in second.content
    assert result["checks"] == [] or result["finish_reason"] == "answered"
    assert result["consecutive_errors"] == 1  # the refusal is an error the streak counts


# ModelRetryMiddleware and ModelFallbackMiddleware: wrap_model_call around decide's call ----------------------


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_model_retry_calls_the_model_again_after_an_error(sync):
    retry = ModelRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    result, model = run([retry], [ValueError("flaky provider"), "the answer"], sync=sync)
    assert (result["final_answer"], len(model.calls)) == ("the answer", 2)


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_model_fallback_answers_with_the_next_model_bound_as_the_protocol_binds(sync):
    fallback = ScriptedChatModel(replies=[tool_call("add", {"a": 2, "b": 3}), "5"])
    first = ScriptedChatModel(replies=[ValueError("down")] * 4)
    result, _ = run([ModelFallbackMiddleware(fallback)], [], sync=sync, model=first)
    assert result["final_answer"] == "5" and tool_messages(result)[0].content == "5"
    assert [tool["function"]["name"] for tool in fallback.calls[0].tools] == ["add", "lookup", "explode"]


# PIIMiddleware: before_model changes the task message -------------------------------------------------------


def test_pii_redacts_an_email_in_the_task_before_the_model_sees_it_and_in_the_saved_task():
    result, model = run([PIIMiddleware("email")], ["sent"], task="mail the sum to john.doe@example.com")
    sent = " ".join(message.text for message in model.calls[0].messages)
    assert "john.doe@example.com" not in sent and "[REDACTED_EMAIL]" in sent
    assert result["task"] == "mail the sum to [REDACTED_EMAIL]"


def test_pii_redacts_tool_results_in_the_window():
    pii = PIIMiddleware("email", apply_to_input=False, apply_to_tool_results=True)
    replies = [tool_call("lookup", {"key": "ann@example.com"}), "done"]
    result, model = run([pii], replies)
    assert "ann@example.com" not in model.calls[1].messages[-1].text
    assert "[REDACTED_EMAIL]" in tool_messages(result)[0].content  # the saved window holds the redacted result


# SummarizationMiddleware: before_model replaces the window (RemoveMessage(REMOVE_ALL_MESSAGES)) ------------


def test_summarization_replaces_the_window_with_a_summary_and_keeps_calls_with_their_results():
    summarizer = ScriptedChatModel(replies=["SUMMARY: added numbers"] * 5)
    summarize = SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 2))
    result, model = run([summarize], [*THREE_ADDS, tool_call("add", {"a": 9, "b": 9}), "done"])
    assert result["final_answer"] == "done" and summarizer.calls
    last = model.calls[-1].messages
    assert any("SUMMARY: added numbers" in message.text for message in last)
    assert len([m for m in last if isinstance(m, ToolMessage)]) < 4  # folded, not all four results


# LLMToolSelectorMiddleware: wrap_model_call narrows the tools bound for the call ---------------------------


def test_llm_tool_selector_binds_only_the_selected_tools():
    selection = AIMessage("", tool_calls=[{"name": "ToolSelectionResponse", "args": {"tools": ["add"]}, "id": "s"}])
    selector = ScriptedChatModel(replies=[selection])
    result, model = run([LLMToolSelectorMiddleware(model=selector, max_tools=1)], ["no tools needed"])
    assert result["final_answer"] == "no tools needed"
    assert [tool["function"]["name"] for tool in model.calls[0].tools] == ["add"]


# ContextEditingMiddleware: wrap_model_call edits the request, never the saved window ---------------------------


def test_context_editing_clears_old_tool_results_in_the_request_only():
    edit = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=10, keep=1)])
    result, model = run([edit], [*THREE_ADDS, "done"])
    sent = [m.text for m in model.calls[-1].messages if isinstance(m, ToolMessage)]
    assert sent[:-1] == ["[cleared]"] * (len(sent) - 1) and sent[-1] == "3"
    assert [m.content for m in tool_messages(result)] == ["1", "2", "3"]


# TodoListMiddleware: a tool of its own that writes its state key with a Command; its system prompt --------------


def test_todo_list_adds_write_todos_whose_command_writes_the_todos_key():
    todos = [{"content": "add the numbers", "status": "in_progress"}]
    replies = [tool_call("write_todos", {"todos": todos}), "done"]
    result, model = run([TodoListMiddleware()], replies)
    assert result["todos"] == todos
    assert "write_todos" in model.calls[0].messages[0].text  # its instructions joined the system message
    assert tool_messages(result)[0].content.startswith("Updated todo list")


def test_todo_list_refuses_parallel_write_todos_calls_through_its_after_model_hook():
    todos = [{"content": "x", "status": "pending"}]
    calls = parallel_calls([("write_todos", {"todos": todos}), ("write_todos", {"todos": todos})])
    result, _ = run([TodoListMiddleware()], [calls, "done"])
    assert all(m.status == "error" for m in tool_messages(result)[:2])
    assert "todos" not in result


# HumanInTheLoopMiddleware: refused, reinloop's approvals do its job ---------------------------------------------


def test_human_in_the_loop_middleware_is_refused_in_favour_of_approve():
    with pytest.raises(ConfigurationError, match="approve="):
        build_agent(ScriptedChatModel(), [add], middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})])


# The decorator forms -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_wrap_tool_call_sees_every_call_with_its_validated_arguments(sync):
    seen: list[tuple[str, dict[str, Any]]] = []
    if sync:

        @wrap_tool_call
        def spy(request, handler):
            seen.append((request.tool_call["name"], request.tool_call["args"]))
            return handler(request)

    else:

        @wrap_tool_call
        async def spy(request, handler):
            seen.append((request.tool_call["name"], request.tool_call["args"]))
            return await handler(request)

    calls = parallel_calls([("add", {"a": 1, "b": 2}), ("add", {"a": "x"}), ("lookup", {"key": "k"})])
    result, _ = run([spy], [calls, "done"], sync=sync)
    # the invalid call never reached a tool, nor the wrapper; the valid ones run at once, in any order
    assert sorted(seen) == [("add", {"a": 1, "b": 2}), ("lookup", {"key": "k"})]
    assert [m.content for m in tool_messages(result)][::2] == ["3", "value of k"]


def test_wrap_tool_call_runs_inside_the_timeout_and_its_result_is_judged_like_the_tool_s():
    @wrap_tool_call
    def empty(request, handler):
        handler(request)
        return ToolMessage("", tool_call_id=request.tool_call["id"])

    result, _ = run([empty], [tool_call("add", {"a": 1, "b": 2}), "done"])
    assert tool_messages(result)[0].status == "error" and "no usable result" in tool_messages(result)[0].content


def test_wrap_tool_call_handler_raises_what_the_tool_raised_and_an_error_is_an_error():
    raised: list[str] = []

    @wrap_tool_call
    def catch(request, handler):
        try:
            return handler(request)
        except ZeroDivisionError as exc:
            raised.append(type(exc).__name__)
            raise

    result, _ = run([catch], [tool_call("explode", {"reason": "x"}), "done"], config=AgentConfig(tool_attempts=1))
    assert raised == ["ZeroDivisionError"] and tool_messages(result)[0].status == "error"


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_before_model_wrap_model_call_and_dynamic_prompt_shape_the_request(sync):
    @before_model
    def note(state, runtime):
        return {"messages": [HumanMessage("Be brief.", id="note")]}

    @dynamic_prompt
    def prompt(request):
        return f"You help with: {request.state['task']}"

    sizes: list[int] = []

    @wrap_model_call
    def measure(request, handler):
        sizes.append(len(request.messages))
        return handler(request)

    middleware = [note, prompt, measure]
    if not sync:

        @wrap_model_call
        async def ameasure(request, handler):
            sizes.append(len(request.messages))
            return await handler(request)

        middleware = [note, prompt, ameasure]
    result, model = run(middleware, ["ok"], sync=sync, task="say ok")
    sent = model.calls[0].messages
    assert isinstance(sent[0], SystemMessage) and sent[0].text == "You help with: say ok"
    assert sent[-1].text == "Be brief." and sizes == [len(sent) - 1]
    assert result["final_answer"] == "ok"


def test_after_model_jump_to_model_asks_again_and_jump_to_end_stops():
    asked: list[str] = []

    @after_model(can_jump_to=["model", "end"])
    def insist(state, runtime):
        reply = state["messages"][-1]
        asked.append(reply.text)
        if reply.text == "maybe":
            return {"jump_to": "model"}
        if reply.text == "stop":
            return {"jump_to": "end", "messages": [AIMessage("Stopped: the model said stop.")]}
        return None

    result, _ = run([insist], ["maybe", "42"])
    assert (result["final_answer"], asked) == ("42", ["maybe", "42"])
    assert result["usage"]["model_calls"] == 2  # both calls are counted
    result, _ = run([insist], ["stop"])
    assert result["finish_reason"] == "middleware"
    assert result["messages"][-1].content.startswith("Stopped: the model said stop.")


def test_before_agent_runs_once_at_the_start_of_a_run_and_after_agent_at_its_end():
    events: list[str] = []

    @before_agent
    def start(state, runtime):
        events.append(f"start {state['task']}")

    @after_agent
    def end(state, runtime):
        events.append(f"end {state['finish_reason']}")

    run([start, end], [*THREE_ADDS[:2], "done"])
    assert events == ["start add", "end answered"]


# A middleware subclass with state of its own ------------------------------------------------------------------


class CallCount(TypedDict, total=False):
    replies_seen: int


class CountReplies(AgentMiddleware):
    state_schema = CallCount

    def after_model(self, state, runtime):
        return {"replies_seen": state.get("replies_seen", 0) + 1}

    async def aafter_model(self, state, runtime):
        return self.after_model(state, runtime)


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_a_middleware_subclass_keeps_its_state_key_in_the_saved_state(sync):
    result, _ = run([CountReplies()], [*THREE_ADDS, "done"], sync=sync, checkpointer=InMemorySaver())
    assert result["replies_seen"] == 4


def test_middleware_with_the_same_name_is_refused():
    with pytest.raises(ConfigurationError, match="unique"):
        build_agent(ScriptedChatModel(), [add], middleware=[CountReplies(), CountReplies()])


def test_tool_call_limit_with_exit_behavior_end_stops_the_run():
    limit = ToolCallLimitMiddleware(tool_name="lookup", run_limit=1, exit_behavior="end")
    replies = [tool_call("lookup", {"key": "k"}), tool_call("lookup", {"key": "j"}), "never sent"]
    result, model = run([limit], replies)
    assert result["finish_reason"] == "middleware" and len(model.calls) == 2
    assert "call limit" in result["messages"][-1].content.lower()
    assert [m.content for m in tool_messages(result)] == ["value of k"]  # the call over the limit never ran


def test_pii_redacts_the_reply_in_the_saved_window_with_apply_to_output():
    pii = PIIMiddleware("email", apply_to_input=False, apply_to_output=True)
    reply = tool_call("add", {"a": 1, "b": 2}, content="I will mail bob@example.com")
    result, _ = run([pii], [reply, "done"])
    thought = next(m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert thought.content == "I will mail [REDACTED_EMAIL]"


class RecordingModel(ScriptedChatModel):
    """Records the keyword arguments each call was bound with."""

    bound: list[dict[str, Any]] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.bound.append(kwargs)
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_wrap_model_call_that_changes_tool_choice_and_model_settings_gets_them_bound():
    @wrap_model_call
    def settle(request, handler):
        return handler(request.override(tool_choice="add", model_settings={"temperature": 0.0}))

    model = RecordingModel(replies=["ok"])
    result, _ = run([settle], [], model=model)
    assert result["final_answer"] == "ok"
    assert model.bound[0]["temperature"] == 0.0 and model.bound[0]["tool_choice"] == "add"
