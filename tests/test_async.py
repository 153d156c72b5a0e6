"""One logic, two drivers: the same scripted runs end in the same state under invoke and ainvoke, and under
ainvoke the model, the summarizer, the store and async tools are awaited on the event loop while sync tools
keep their hard timeout in a thread that never blocks it."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from reinloop import AgentConfig, build_agent
from reinloop.memory import arecall, aremember, asummarize, recall, remember, summarize
from reinloop.nodes import aexecute_tool, execute_tool
from reinloop.state import CallCheck
from reinloop.testing import ScriptedChatModel, json_action, parallel_calls, tool_call
from reinloop.tools import ToolRegistry
from reinloop.tools import retry as retry_module
from tests.conftest import THREAD, add, explode, lookup, make_context
from tests.tools.test_execution import Crashes, Exits, Produces, Sums, TellsItsKey

DRIVERS = ["invoke", "ainvoke"]


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The backoff waits of tool retries under either driver, in order; nothing sleeps."""
    recorded: list[float] = []

    async def apause(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(retry_module, "pause", recorded.append)
    monkeypatch.setattr(retry_module, "apause", apause)
    return recorded


def run(agent: Any, how: str, task: str = "t", config: dict[str, Any] | None = None) -> dict[str, Any]:
    config = config or THREAD
    if how == "invoke":
        return agent.invoke({"task": task}, config)
    return asyncio.run(agent.ainvoke({"task": task}, config))


def plain(messages: Iterable[BaseMessage]) -> list[tuple[Any, ...]]:
    """Messages without the ids the scripted model draws at random, for comparing two runs."""
    return [
        (
            type(m).__name__,
            m.text,
            m.name,
            [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])],
            getattr(m, "tool_call_id", None),
            getattr(m, "status", None),
        )
        for m in messages
    ]


def comparable(state: dict[str, Any], model: ScriptedChatModel) -> dict[str, Any]:
    """The final state and everything the model was sent, as two drivers should agree on them."""
    return {
        **{key: value for key, value in state.items() if key != "messages"},
        "messages": plain(state["messages"]),
        "prompts": [plain(call.messages) for call in model.calls],
    }


def numbered_ids(text: str) -> str:
    """`text` with the random call ids a text protocol draws numbered in order of appearance."""
    ids: dict[str, str] = {}
    return re.sub(r"call_[0-9a-f]{24}", lambda match: ids.setdefault(match[0], f"call-{len(ids)}"), text)


# The same scenarios under both drivers --------------------------------------------------------------------


class Flaky:
    """A tool that raises its first `failures` calls, then answers; a fetch, declared safe to repeat."""

    def __init__(self, failures: int) -> None:
        self.calls = 0

        @tool
        def fetch(query: str) -> str:
            """Fetch a page from a service that sometimes fails."""
            self.calls += 1
            if self.calls <= failures:
                raise ConnectionError(f"service unavailable (call {self.calls})")
            return f"page for {query}"

        fetch.metadata = {"reinloop": {"retryable": True}}
        self.tool = fetch


@tool
async def slow_double(x: int) -> int:
    """Double a number, asynchronously."""
    await asyncio.sleep(0)
    return 2 * x


def summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(respond=lambda messages: f"summary of {len(messages[-1].text)} characters")


def failing_summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(respond=lambda messages: ConnectionError("no summaries today"))


def indexed_store() -> InMemoryStore:
    return InMemoryStore(index={"embed": DeterministicFakeEmbedding(size=16), "dims": 16, "fields": ["text"]})


# name -> (replies, tools, summary model factory, store factory, config)
SCENARIOS: dict[str, tuple[list[Any], list[Any], Callable[[], Any] | None, Callable[[], Any] | None, dict]] = {
    "tool error feedback": (
        [tool_call("explode", {"reason": "x"}, id="c1"), tool_call("add", {"a": 1, "b": 1}, id="c2"), "2"],
        [add, lookup, explode],
        None,
        None,
        {},
    ),
    "unknown key fed back": (
        [
            tool_call("lookup", {"key": "nope"}, id="c1"),
            tool_call("lookup", {"key": "capital_of_france"}, id="c2"),
            "Paris",
        ],
        [add, lookup, explode],
        None,
        None,
        {},
    ),
    "parse retry": (
        ["I'll add: {action: add}", json_action("add", {"a": 1, "b": 1}), json_action("final_answer", "2")],
        [add, lookup, explode],
        None,
        None,
        {"protocol": "json"},
    ),
    "async tool": ([tool_call("slow_double", {"x": 21}, id="c1"), "42"], [slow_double], None, None, {}),
    "parallel calls, one rejected": (
        [
            parallel_calls(
                [("add", {"a": 1, "b": 2}), ("slow_double", {"x": "no"}), ("slow_double", {"x": 4})],
                ids=["c1", "c2", "c3"],
            ),
            "3 and 8",
        ],
        [add, slow_double],
        None,
        None,
        {},
    ),
    "transient model error retried": ([ConnectionError("reset by peer"), "fine"], [add], None, None, {}),
    "compression with a summarizer and a store": (
        [tool_call("add", {"a": n, "b": 1}, id=f"c{n}") for n in range(9)] + ["done"],
        [add],
        summarizer,
        indexed_store,
        {"memory_capacity": 2, "compress_every": 2, "max_iterations": 12},
    ),
    "compression with a failing summarizer": (
        [tool_call("add", {"a": n, "b": 1}, id=f"c{n}") for n in range(6)] + ["done"],
        [add],
        failing_summarizer,
        indexed_store,
        {"memory_capacity": 2, "compress_every": 2},
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS), ids=list(SCENARIOS))
def test_a_scripted_run_ends_in_the_same_state_under_invoke_and_ainvoke(name):
    replies, tools, summary_model, store_factory, config = SCENARIOS[name]
    seen = {}
    for how in DRIVERS:
        model = ScriptedChatModel(replies=list(replies))
        store = store_factory() if store_factory else None
        summaries = summary_model() if summary_model else None
        settings = AgentConfig(**{"model_retry_backoff_s": 0, **config})
        agent = build_agent(
            model, tools, config=settings, checkpointer=InMemorySaver(), store=store, summary_model=summaries
        )
        result = run(agent, how)
        assert result["finish_reason"] == "answered"
        memories = (
            sorted((item.key, item.value["text"]) for item in store.search(("reinloop",), limit=100)) if store else []
        )
        summary_prompts = [plain(call.messages) for call in summaries.calls] if summaries else []
        seen[how] = numbered_ids(repr((comparable(result, model), memories, summary_prompts)))
    assert seen["ainvoke"] == seen["invoke"]
    if store_factory:
        assert "-summary" in seen["invoke"]  # the scenario did fold into the store


@pytest.mark.parametrize("how", DRIVERS)
def test_a_hung_sync_tool_times_out_under_either_driver(how, gate):
    model = ScriptedChatModel(replies=[tool_call("hang", {"seconds": 999}, id="c1"), "gave up waiting"])
    agent = build_agent(model, [gate.tool], config=AgentConfig(tool_timeout_s=0.2), checkpointer=InMemorySaver())
    result = run(agent, how)
    (observation,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert "gave no result within 0.2 s" in observation.content
    assert gate.entered.is_set() and result["finish_reason"] == "answered"


@pytest.mark.parametrize("how", DRIVERS)
def test_a_flaky_tool_is_retried_with_the_same_backoff_under_either_driver(how, waits):
    flaky = Flaky(failures=2)
    model = ScriptedChatModel(replies=[tool_call("fetch", {"query": "q"}, id="c1"), "done"])
    agent = build_agent(model, [flaky.tool], config=AgentConfig(tool_backoff_s=1.0, tool_backoff_max_s=30.0))
    result = run(agent, how)
    (observation,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert (observation.content, flaky.calls) == ("page for q", 3)
    assert len(waits) == 2 and 1.0 <= waits[0] <= 2.0 and 2.0 <= waits[1] <= 3.0  # 1 s, 2 s, + up to 1 s jitter


# execute_tool at node level: both isolations, the outcomes every path can produce ----------------------------

NODE_CASES = [
    ("thread", TellsItsKey(), {"n": 1}, None),
    ("process", TellsItsKey(), {"n": 1}, None),
    ("thread", Exits(), {}, None),
    ("process", Exits(), {}, None),
    ("process", Crashes(), {}, None),
    ("thread", Produces(), {"kind": "10**5000"}, None),
    ("thread", Produces(), {"kind": "unprintable"}, None),
    ("process", Sums(), {"n": 10**10}, 0.5),  # holds the GIL: only the worker's kill ends it
]


@pytest.mark.parametrize(
    ("isolation", "tool_obj", "args", "timeout_s"),
    NODE_CASES,
    ids=[f"{case[0]}-{case[1].name}-{list(case[2].values())}" for case in NODE_CASES],
)
def test_execute_tool_and_its_async_form_give_the_same_outcome(isolation, tool_obj, args, timeout_s):
    registry = ToolRegistry()
    registry.add(tool_obj, isolation=isolation, timeout_s=timeout_s)
    ctx = make_context(tools=registry)
    call = CallCheck(call_id="c1", name=tool_obj.name, args=args, signature="", key="t/1/c1")
    call |= {"error_kind": None, "error": None}
    sync = execute_tool(call, ctx, {})
    awaited = asyncio.run(aexecute_tool(call, ctx, {}))
    assert awaited == sync


# Under ainvoke the I/O is awaited on the event loop -------------------------------------------------------


class LoopOnlyModel(ScriptedChatModel):
    """A scripted model that only works awaited: `_generate` raises; `_agenerate` records the thread it ran in."""

    threads: list[int] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
        raise AssertionError("called synchronously")

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs):
        self.threads.append(threading.get_ident())
        return ScriptedChatModel._generate(self, messages, stop, None, **kwargs)


class LoopOnlyStore(BaseStore):
    """A store that only works awaited: `batch` raises, `abatch` records its thread and uses an in-memory store."""

    def __init__(self) -> None:
        self.inner = indexed_store()
        self.index_config = self.inner.index_config
        self.threads: list[int] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise AssertionError("called synchronously")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self.threads.append(threading.get_ident())
        return await self.inner.abatch(ops)


def test_under_ainvoke_the_model_the_summarizer_and_the_store_are_awaited_on_the_event_loop():
    def decisions(messages: list[BaseMessage]) -> AIMessage | str:
        return tool_call("add", {"a": len(model.threads), "b": 1}) if len(model.threads) <= 6 else "done"

    model = LoopOnlyModel(respond=decisions)
    summaries = LoopOnlyModel(respond=lambda messages: "a summary")
    store = LoopOnlyStore()
    config = AgentConfig(memory_capacity=2, compress_every=2)
    agent = build_agent(model, [add], config=config, checkpointer=InMemorySaver(), store=store, summary_model=summaries)

    async def main() -> tuple[dict[str, Any], int]:
        return await agent.ainvoke({"task": "add"}, THREAD), threading.get_ident()

    result, loop_thread = asyncio.run(main())
    assert result["finish_reason"] == "answered" and result["folds"] >= 1
    assert len(model.threads) == 7 and summaries.threads and store.threads
    assert set(model.threads) == set(summaries.threads) == set(store.threads) == {loop_thread}


def test_a_sync_tool_runs_in_a_thread_and_leaves_the_event_loop_free():
    entered, released = threading.Event(), threading.Event()

    @tool
    def wait_for_release(x: int) -> str:
        """Wait until released."""
        entered.set()
        return "released" if released.wait(30) else "never released"

    async def release_from_the_loop() -> None:
        # Runs only if the loop is free while the tool waits in its thread.
        while not entered.is_set():
            await asyncio.sleep(0.01)
        released.set()

    model = ScriptedChatModel(replies=[tool_call("wait_for_release", {"x": 1}), "done"])
    agent = build_agent(model, [wait_for_release], config=AgentConfig(tool_timeout_s=60))

    async def main() -> dict[str, Any]:
        releaser = asyncio.create_task(release_from_the_loop())
        result = await agent.ainvoke({"task": "t"})
        await releaser
        return result

    result = asyncio.run(main())
    (observation,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert observation.content == "released"


def test_an_async_tool_is_awaited_on_the_callers_event_loop():
    opened = asyncio.Event()  # bound to the loop that first waits on it: awaiting it elsewhere fails

    @tool
    async def wait_until_open(x: int) -> str:
        """Wait until the door opens."""
        await opened.wait()
        return f"open at {x}"

    model = ScriptedChatModel(replies=[tool_call("wait_until_open", {"x": 7}), "done"])
    agent = build_agent(model, [wait_until_open], config=AgentConfig(tool_timeout_s=60))

    async def main() -> dict[str, Any]:
        asyncio.get_running_loop().call_later(0.05, opened.set)
        return await agent.ainvoke({"task": "t"})

    result = asyncio.run(main())
    (observation,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert observation.content == "open at 7"


def test_an_async_tool_past_its_deadline_is_a_timeout_and_is_cancelled():
    cancelled = []

    @tool
    async def never_ends(x: int) -> str:
        """Wait for ever."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return "impossible"

    never_ends.metadata = {"reinloop": {"retryable": True}}  # waiting has no effect: safe to repeat
    model = ScriptedChatModel(replies=[tool_call("never_ends", {"x": 1}), "gave up"])
    agent = build_agent(model, [never_ends], config=AgentConfig(tool_timeout_s=0.1))

    async def main() -> dict[str, Any]:
        result = await agent.ainvoke({"task": "t"})
        await asyncio.sleep(0)  # the cancelled task's last step
        return result

    result = asyncio.run(main())
    (observation,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert "gave no result within 0.1 s (3 attempts)" in observation.content  # a timeout is retried in place
    assert cancelled == [1, 1, 1] and result["finish_reason"] == "answered"


def test_concurrent_ainvoke_runs_wait_for_the_model_at_the_same_time():
    runs = 20
    in_flight = {"now": 0, "max": 0}
    everyone = asyncio.Event()

    class SlowModel(LoopOnlyModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            in_flight["now"] += 1
            in_flight["max"] = max(in_flight["max"], in_flight["now"])
            if in_flight["now"] == runs:
                everyone.set()
            try:
                # The first calls wait until all runs are waiting on the model at once (or give up after 10 s, so
                # a serializing implementation fails the assertion below instead of hanging).
                if not everyone.is_set():
                    await asyncio.wait_for(everyone.wait(), 10)
                await asyncio.sleep(0.2)
            except TimeoutError:
                pass
            finally:
                in_flight["now"] -= 1
            return await super()._agenerate(messages, stop, run_manager, **kwargs)

    def reply(messages: list[BaseMessage]) -> AIMessage | str:
        done = any(isinstance(m, ToolMessage) for m in messages)
        return "done" if done else tool_call("add", {"a": 1, "b": 2})

    model = SlowModel(respond=reply)
    agent = build_agent(model, [add], checkpointer=InMemorySaver())

    async def main() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(agent.ainvoke({"task": "add"}, {"configurable": {"thread_id": f"t{n}"}}) for n in range(runs))
        )

    results = asyncio.run(main())
    assert [result["final_answer"] for result in results] == ["done"] * runs
    assert in_flight["max"] == runs


# The memory functions' async forms -------------------------------------------------------------------------


def test_recall_remember_and_summarize_agree_with_their_async_forms():
    namespace = ("reinloop", "memories", "t")
    stores = {how: indexed_store() for how in DRIVERS}
    facts = ["the code word is PINEAPPLE", "the rocket is blue", "launch at noon"]
    for number, fact in enumerate(facts):
        remember(stores["invoke"], namespace, f"k{number}", fact, kind="step")
        asyncio.run(aremember(stores["ainvoke"], namespace, f"k{number}", fact, kind="step"))
    queries = ["code word", "colour of the rocket"]
    assert asyncio.run(arecall(stores["ainvoke"], namespace, queries, 2)) == recall(
        stores["invoke"], namespace, queries, 2
    )
    assert len(recall(stores["invoke"], namespace, queries, 2)) == 2

    for factory in (summarizer, failing_summarizer):
        sync = summarize(factory(), "t", facts, 300)
        awaited = asyncio.run(asummarize(factory(), "t", facts, 300))
        assert (awaited.text, awaited.by_model) == (sync.text, sync.by_model)
