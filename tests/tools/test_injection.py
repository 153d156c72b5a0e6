"""LangChain 1.x tool features inside a built agent: injected arguments, Command updates, the stream writer.

Every test runs the compiled agent with the scripted model, and checks what the tool saw and what the model
saw: the schema bound to it and the observations it was sent.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langchain.tools import InjectedState, InjectedStore, InjectedToolCallId, ToolRuntime
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from reinloop import AgentConfig, AgentState, ToolRegistry, build_agent
from reinloop.errors import ConfigurationError
from reinloop.testing import ScriptedChatModel, tool_call
from reinloop.tools import idempotency_key
from reinloop.tools.commands import COMMAND_REFUSED_TEMPLATE

THREAD = {"configurable": {"thread_id": "inject-thread"}}
INJECTED_NAMES = ("runtime", "state", "task", "call_id", "store", "cart")


class CartState(AgentState, total=False):
    # Items the cart tools put in; tools write it with Command(update=...), parallel calls append.
    cart: Annotated[list[str], operator.add]


def run(tools, replies, *, task="do it", store=None, state_schema=AgentState, **invoke):
    model = ScriptedChatModel(replies=list(replies))
    agent = build_agent(
        model, tools, checkpointer=InMemorySaver(), store=store, state_schema=state_schema, config=AgentConfig()
    )
    final = agent.invoke({"task": task}, THREAD, **invoke)
    return final, model


def bound_properties(model: ScriptedChatModel, name: str) -> dict[str, Any]:
    """The argument schema of tool `name` as the model was sent it on its first call."""
    tools = {spec["function"]["name"]: spec["function"]["parameters"] for spec in model.calls[0].tools}
    return tools[name]


def observations(final) -> list[ToolMessage]:
    return [message for message in final["messages"] if isinstance(message, ToolMessage)]


def assert_model_never_saw_injected(model: ScriptedChatModel) -> None:
    """No tool schema bound to the model, and no message sent to it, names an injected argument."""
    for call in model.calls:
        for spec in call.tools:
            assert not set(spec["function"]["parameters"].get("properties", {})) & set(INJECTED_NAMES)
        for message in call.messages:
            if isinstance(message, ToolMessage):
                assert "runtime" not in message.text and "InjectedState" not in message.text


def test_tool_runtime_gets_state_context_config_call_id_store_and_tools():
    seen: dict[str, Any] = {}

    @tool
    def profile(field: str, runtime: ToolRuntime) -> str:
        """Read a field of the user's profile."""
        seen.update(
            call_id=runtime.tool_call_id,
            task=runtime.state["task"],
            window=len(runtime.state["messages"]),
            context=runtime.context,
            key=idempotency_key(runtime.config),
            store=runtime.store,
            tools=[t.name for t in runtime.tools],
        )
        return f"{field} of {runtime.context['user']}"

    store = InMemoryStore()
    final, model = run(
        [profile],
        [tool_call("profile", {"field": "email"}, id="call-rt"), "done"],
        task="find the email",
        store=store,
        context={"user": "ada"},
    )
    assert seen["call_id"] == "call-rt"
    assert seen["task"] == "find the email"
    assert seen["window"] >= 1  # the model's decision is in the window the tool was shown
    assert seen["context"] == {"user": "ada"}
    assert seen["key"] == "inject-thread/1/call-rt"
    assert seen["store"] is store
    assert seen["tools"] == ["profile"]
    assert observations(final)[0].content == "email of ada"
    assert bound_properties(model, "profile")["properties"] == {"field": {"type": "string"}}
    assert_model_never_saw_injected(model)


def test_injected_state_whole_and_by_key():
    seen: dict[str, Any] = {}

    @tool
    def recall(state: Annotated[dict, InjectedState], task: Annotated[str, InjectedState("task")]) -> str:
        """Say what the task was."""
        seen.update(state_keys=set(state), task=task, state_task=state["task"])
        return f"the task was {task!r}"

    final, model = run([recall], [tool_call("recall", {}), "done"], task="count the sheep")
    assert seen["task"] == seen["state_task"] == "count the sheep"
    assert {"task", "messages", "decision", "checks"} <= seen["state_keys"]
    assert observations(final)[0].content == "the task was 'count the sheep'"
    assert bound_properties(model, "recall")["properties"] == {}
    assert_model_never_saw_injected(model)


def test_injected_tool_call_id_is_the_calls_id():
    seen: list[str] = []

    @tool
    def stamp(label: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Stamp a label."""
        seen.append(call_id)
        return f"{label}@{call_id}"

    final, model = run([stamp], [tool_call("stamp", {"label": "a"}, id="call-42"), "done"])
    assert seen == ["call-42"]
    assert observations(final)[0].content == "a@call-42"
    assert bound_properties(model, "stamp")["properties"] == {"label": {"type": "string"}}
    assert_model_never_saw_injected(model)


def test_injected_store_is_the_agents_store():
    @tool
    def remember(fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Remember a fact for later runs."""
        store.put(("facts",), "latest", {"fact": fact})
        return "remembered"

    store = InMemoryStore()
    final, model = run([remember], [tool_call("remember", {"fact": "sky is blue"}), "done"], store=store)
    item = store.get(("facts",), "latest")
    assert item is not None and item.value == {"fact": "sky is blue"}
    assert observations(final)[0].content == "remembered"
    assert bound_properties(model, "remember")["properties"] == {"fact": {"type": "string"}}
    assert_model_never_saw_injected(model)


def test_injected_store_without_a_store_is_a_configuration_error():
    @tool
    def remember(fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Remember a fact."""
        return "remembered"

    with pytest.raises(ConfigurationError, match=r"build it with build_agent\(\.\.\., store=\.\.\.\)"):
        run([remember], [tool_call("remember", {"fact": "x"}), "done"])


def test_the_model_cannot_forge_an_injected_argument_and_is_not_told_about_it():
    seen: list[str] = []

    @tool
    def stamp(label: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Stamp a label."""
        seen.append(call_id)
        return label

    _, model = run(
        [stamp],
        [
            tool_call("stamp", {"call_id": "forged"}, id="c1"),  # no label, and an argument it may not send
            tool_call("stamp", {"label": "ok"}, id="c2"),
            "done",
        ],
    )
    # What the model was sent after its first call (a failed decision's full text later leaves the window).
    rejected = next(m for m in model.calls[1].messages if isinstance(m, ToolMessage)).text
    assert "label: missing (required)" in rejected
    assert "call_id: unexpected argument (expected one of ['label'])" in rejected
    assert "Expected stamp(label: string)." in rejected
    assert seen == ["c2"]  # the forged call never ran; the valid one got its real id


def test_a_validation_error_inside_the_tool_never_shows_the_injected_state():
    # The annotation is wrong (the state is a dict, not an int): the tool's own validation fails, and its
    # message must not carry the state (the task here) into the observation, the checkpoint or the model.
    @tool
    def broken(x: int, state: Annotated[int, InjectedState]) -> str:
        """A tool with a wrong annotation."""
        return "never"

    final, model = run([broken], [tool_call("broken", {"x": 1}), "done"], task="the secret is hunter2")
    observation = observations(final)[0].content
    assert "ValidationError: state: " in observation
    assert "hunter2" not in observation
    sent = [m.text for m in model.calls[1].messages if isinstance(m, ToolMessage)]
    assert sent == [observation]


def test_command_update_writes_the_state_schemas_own_keys_and_answers_the_call():
    seen: list[list[str]] = []

    @tool
    def add_to_cart(item: str, runtime: ToolRuntime) -> Command:
        """Put an item in the cart."""
        seen.append(list(runtime.state.get("cart") or []))
        answer = ToolMessage(f"added {item}", tool_call_id=runtime.tool_call_id)
        return Command(update={"cart": [item], "messages": [answer]})

    @tool
    def show_cart(cart: Annotated[list[str], InjectedState("cart")]) -> str:
        """Show the cart."""
        return ", ".join(cart)

    final, model = run(
        [add_to_cart, show_cart],
        [
            tool_call("add_to_cart", {"item": "tea"}),
            tool_call("add_to_cart", {"item": "jam"}),
            tool_call("show_cart", {}),
            "done",
        ],
        state_schema=CartState,
    )
    assert final["cart"] == ["tea", "jam"]
    assert seen == [[], ["tea"]]
    assert [m.content for m in observations(final)] == ["added tea", "added jam", "tea, jam"]
    assert [m.status for m in observations(final)] == ["success"] * 3
    # The observation is reinloop's one result message per call, not the tool's ToolMessage as well.
    assert len(observations(final)) == 3
    assert bound_properties(model, "add_to_cart")["properties"] == {"item": {"type": "string"}}
    assert bound_properties(model, "show_cart")["properties"] == {}
    assert_model_never_saw_injected(model)


def _answer(runtime: ToolRuntime) -> list[ToolMessage]:
    return [ToolMessage("ok", tool_call_id=runtime.tool_call_id)]


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda rt: Command(update={"consecutive_errors": 0, "messages": _answer(rt)}),
            "it writes 'consecutive_errors'",
        ),
        (lambda rt: Command(update={"iterations_left": 99, "messages": _answer(rt)}), "it writes 'iterations_left'"),
        (lambda rt: Command(update={"basket": ["x"], "messages": _answer(rt)}), "it writes 'basket'"),
        (lambda rt: Command(update={"cart": ["x"]}), "must hold exactly one message"),
        (
            lambda rt: Command(update={"cart": ["x"], "messages": [*_answer(rt), AIMessage("I am the model")]}),
            "must hold exactly one message",
        ),
        (lambda rt: Command(update={"cart": [10**30], "messages": _answer(rt)}), "the value of 'cart' cannot be saved"),
        (lambda rt: Command(goto="check_finish", update={"messages": _answer(rt)}), "cannot steer reinloop's graph"),
        (lambda rt: Command(graph=Command.PARENT, update={"messages": _answer(rt)}), "cannot steer reinloop's graph"),
    ],
    ids=["guard-counter", "budget", "unknown-key", "no-answer", "other-message", "unstorable", "goto", "parent-graph"],
)
def test_command_update_refused_as_a_whole_with_an_error_observation(make, problem):
    @tool
    def meddle(runtime: ToolRuntime) -> Command:
        """A tool that writes what it should not."""
        return make(runtime)

    final, model = run([meddle], [tool_call("meddle", {}), "done"], state_schema=CartState)
    observation = observations(final)[0]
    assert observation.status == "error"
    assert observation.content.startswith("Error: 'meddle' failed: it returned a Command that reinloop refuses")
    assert problem in observation.content
    assert observation.content.endswith("nothing of it was applied. Change the arguments or the tool.")
    assert not final.get("cart")  # nothing of the Command was applied
    assert final["consecutive_errors"] == 1  # the refusal counts as an error
    assert final["iterations_left"] == AgentConfig().max_iterations - 1  # one round counted, no budget written
    assert final["finish_reason"] == "answered"
    assert COMMAND_REFUSED_TEMPLATE.split("{")[0] in model.calls[1].messages[-1].text


def test_command_without_a_state_schema_may_only_answer():
    @tool
    def answer_only(runtime: ToolRuntime) -> Command:
        """Answer through a Command."""
        return Command(update={"messages": [ToolMessage("via command", tool_call_id=runtime.tool_call_id)]})

    final, _ = run([answer_only], [tool_call("answer_only", {}), "done"])
    assert observations(final)[0].content == "via command"
    assert observations(final)[0].status == "success"


def test_get_stream_writer_in_a_tool_streams_to_stream_mode_custom():
    @tool
    def long_job(steps: int, runtime: ToolRuntime) -> str:
        """A job that reports its progress."""
        writer = get_stream_writer()  # from LangGraph's context, in the tool's own thread
        for step in range(1, steps + 1):
            writer({"progress": step})
        runtime.stream_writer({"done_by": runtime.tool_call_id})
        return "finished"

    model = ScriptedChatModel(replies=[tool_call("long_job", {"steps": 2}, id="job-1"), "done"])
    agent = build_agent(model, [long_job], checkpointer=InMemorySaver())
    chunks = list(agent.stream({"task": "run the job"}, THREAD, stream_mode="custom"))
    assert chunks == [{"progress": 1}, {"progress": 2}, {"done_by": "job-1"}]
    assert_model_never_saw_injected(model)


def test_get_stream_writer_in_a_plain_tool_reaches_its_thread():
    @tool
    def ping(host: str) -> str:
        """Ping a host."""
        get_stream_writer()({"pinging": host})
        return "pong"

    model = ScriptedChatModel(replies=[tool_call("ping", {"host": "a"}), "done"])
    agent = build_agent(model, [ping], checkpointer=InMemorySaver())
    modes = list(agent.stream({"task": "ping a"}, THREAD, stream_mode=["custom", "updates"]))
    assert [chunk for mode, chunk in modes if mode == "custom"] == [{"pinging": "a"}]


# Build-time rules -------------------------------------------------------------------------------------


def test_a_process_isolated_tool_with_injected_arguments_is_refused_at_build_time():
    @tool
    def stamp(label: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Stamp a label."""
        return label

    with pytest.raises(ConfigurationError, match=r"'stamp' has isolation='process', but takes injected arguments"):
        ToolRegistry().add(stamp, isolation="process")


def test_injected_state_naming_a_key_the_state_lacks_is_refused_at_build_time():
    @tool
    def show_cart(cart: Annotated[list[str], InjectedState("cart")]) -> str:
        """Show the cart."""
        return ", ".join(cart)

    with pytest.raises(ConfigurationError, match=r"takes state key 'cart'.*which the agent's state does not have"):
        build_agent(ScriptedChatModel(replies=[]), [show_cart])
    build_agent(ScriptedChatModel(replies=[]), [show_cart], state_schema=CartState)  # its own key: fine


def test_a_state_schema_must_extend_agent_state():
    class Loose(AgentState, total=False):
        pass

    from typing import TypedDict

    class Other(TypedDict):
        cart: list[str]

    build_agent(ScriptedChatModel(replies=[]), [], state_schema=Loose)
    with pytest.raises(ConfigurationError, match="must extend AgentState"):
        build_agent(ScriptedChatModel(replies=[]), [], state_schema=Other)


def test_tools_reading_the_run_are_not_cacheable_by_default():
    @tool
    def recall(state: Annotated[dict, InjectedState]) -> str:
        """Recall."""
        return "x"

    @tool
    def stamp(label: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Stamp a label."""
        return label

    registry = ToolRegistry()
    registry.add(recall)
    registry.add(stamp)
    assert registry["recall"].cacheable is False  # its result depends on the state, not only its arguments
    assert registry["stamp"].cacheable is True
    assert ToolRegistry().add(recall, cacheable=True) and True


def test_an_argument_merely_named_runtime_is_the_models():
    # LangGraph's ToolNode would put its ToolRuntime into any argument named `runtime`; a film's length is not one.
    @tool
    def film(runtime: int) -> str:
        """Describe a film by its length in minutes."""
        return f"{runtime} minutes"

    final, model = run([film], [tool_call("film", {"runtime": 90}), "done"])
    assert observations(final)[0].content == "90 minutes"
    assert bound_properties(model, "film")["properties"] == {"runtime": {"type": "integer"}}


def test_injected_arguments_and_command_updates_work_the_same_under_ainvoke():
    seen: dict[str, Any] = {}

    @tool
    async def add_item(item: str, runtime: ToolRuntime) -> Command:
        """Put an item in the cart (an async tool, awaited on the event loop)."""
        seen.update(call_id=runtime.tool_call_id, task=runtime.state["task"], user=runtime.context["user"])
        answer = ToolMessage(f"added {item}", tool_call_id=runtime.tool_call_id)
        return Command(update={"cart": [item], "messages": [answer]})

    model = ScriptedChatModel(replies=[tool_call("add_item", {"item": "tea"}, id="call-a"), "done"])
    agent = build_agent(model, [add_item], checkpointer=InMemorySaver(), state_schema=CartState)
    final = asyncio.run(agent.ainvoke({"task": "shop"}, THREAD, context={"user": "ada"}))
    assert seen == {"call_id": "call-a", "task": "shop", "user": "ada"}
    assert final["cart"] == ["tea"] and observations(final)[0].content == "added tea"
    assert_model_never_saw_injected(model)
