"""The private and beta LangGraph names reinloop uses (`reinloop._langgraph`): found in one module, checked at
import, and each behaving as reinloop relies on."""

import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime
from langgraph.types import Command, interrupt

from reinloop import sqlite_checkpointer
from reinloop._langgraph import (
    CONFIG_KEY_DURABILITY,
    CONFIG_KEY_RESUMING,
    CONFIG_KEY_SCRATCHPAD,
    DELTA_COUNTERS_KEY,
    DeltaChannel,
    DeltaSnapshot,
    RunnableCallable,
    compiled_graph_fields,
    get_all_injected_args,
    messages_delta_reducer,
)
from tests.conftest import new_thread

ROOT = Path(__file__).resolve().parent.parent
PRIVATE = re.compile(r"_internal|__pregel|_messages_delta_reducer|_DeltaSnapshot|_get_all_injected_args")


def test_only_the_compat_module_names_langgraphs_private_names():
    found = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "reinloop").rglob("*.py")
        if PRIVATE.search(path.read_text(encoding="utf-8"))
    }
    assert found == {"reinloop/_langgraph.py"}


# What a LangGraph release without one of the names (or with another shape) looks like, done to the installed
# LangGraph in a fresh interpreter before reinloop is imported.
CHANGES = {
    "resuming flag renamed": "import langgraph._internal._constants as m; del m.CONFIG_KEY_RESUMING",
    "scratchpad key gone": "import langgraph._internal._constants as m; del m.CONFIG_KEY_SCRATCHPAD",
    "durability key gone": "import langgraph._internal._constants as m; del m.CONFIG_KEY_DURABILITY",
    "state reader key gone": "import langgraph._internal._constants as m; del m.CONFIG_KEY_READ",
    "runtime key gone": "import langgraph._internal._constants as m; del m.CONFIG_KEY_RUNTIME",
    "resuming flag not a string": "import langgraph._internal._constants as m; m.CONFIG_KEY_RESUMING = None",
    "RunnableCallable moved": "import langgraph._internal._runnable as m; del m.RunnableCallable",
    "scratchpad moved": "import langgraph._internal._scratchpad as m; del m.PregelScratchpad",
    "injected-args helper gone": "import langgraph.prebuilt.tool_node as m; del m._get_all_injected_args",
    "delta reducer gone": "import langgraph.graph.message as m; del m._messages_delta_reducer",
    "delta snapshot gone": "import langgraph.checkpoint.serde.types as m; del m._DeltaSnapshot",
    "delta snapshot reshaped": (
        "import langgraph.checkpoint.serde.types as m\n"
        "class _DeltaSnapshot:\n    def __init__(self, value, version): pass\n"
        "m._DeltaSnapshot = _DeltaSnapshot"
    ),
    "delta history gone": "import langgraph.checkpoint.base as m; del m.BaseCheckpointSaver.get_delta_channel_history",
    "delta replay gone": "import langgraph.channels as m; del m.DeltaChannel.replay_writes",
    "delta counters renamed": (
        "import langgraph.checkpoint.base as m\n"
        "del m.CheckpointMetadata.__annotations__['counters_since_delta_snapshot']"
    ),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_importing_reinloop_on_a_langgraph_without_a_name_fails_with_the_supported_versions(change):
    script = f"{change}\nimport reinloop\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: reinloop cannot run on the installed LangGraph (langgraph 1."), last
    assert "reinloop supports langgraph>=" in last


def test_reinloop_imports_on_the_installed_langgraph():
    done = subprocess.run([sys.executable, "-c", "import reinloop"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


class Counted(TypedDict):
    n: int


def _two_steps(first, second):
    graph = StateGraph(Counted)
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    return graph.compile(checkpointer=InMemorySaver())


def test_the_resuming_flag_is_set_for_the_first_step_of_a_run_that_continues_a_thread_only():
    seen = []
    crash = [True]

    def first(state, config):
        seen.append(("first", bool(config["configurable"].get(CONFIG_KEY_RESUMING))))
        return {"n": 1}

    def second(state, config):
        seen.append(("second", bool(config["configurable"].get(CONFIG_KEY_RESUMING))))
        if crash.pop() if crash else False:
            raise RuntimeError("the process died here")
        return {"n": 2}

    graph, thread = _two_steps(first, second), new_thread()
    with pytest.raises(RuntimeError):
        graph.invoke({"n": 0}, thread)
    assert graph.invoke(None, thread) == {"n": 2}
    assert seen == [("first", False), ("second", False), ("second", True)]


@pytest.mark.parametrize("by_id", [False, True], ids=["one answer", "answers by interrupt id"])
def test_the_scratchpad_carries_the_answer_to_a_tasks_interrupt(by_id):
    seen = []

    def second(state, config):
        pad = config["configurable"][CONFIG_KEY_SCRATCHPAD]
        seen.append((list(pad.resume), pad.get_null_resume(False)))
        return {"n": 2 if interrupt("go on?") == "yes" else 3}

    graph, thread = _two_steps(lambda state: {"n": 1}, second), new_thread()
    stopped = graph.invoke({"n": 0}, thread)
    answer = {stopped["__interrupt__"][0].id: "yes"} if by_id else "yes"
    assert graph.invoke(Command(resume=answer), thread) == {"n": 2}
    # execute_tool's test for "this task was stopped by its own interrupt and now has the answer".
    assert seen == [([], None), ([], "yes") if not by_id else (["yes"], None)]


def test_a_graph_run_with_exit_durability_in_its_configurable_saves_only_at_the_end():
    def count(graph, durability):
        thread = new_thread()
        graph.with_config(configurable={CONFIG_KEY_DURABILITY: durability}).invoke({"n": 0}, thread)
        return len(list(graph.checkpointer.list(thread)))

    graph = _two_steps(lambda state: {"n": 1}, lambda state: {"n": 2})
    assert count(graph, "sync") == 4  # input, first, second, and the loop's first checkpoint
    assert count(graph, "exit") == 1


def test_a_runnable_callable_runs_its_async_form_under_ainvoke():
    seen = []

    async def afunc(state):
        seen.append("async")
        return {"n": 1}

    def func(state):
        seen.append("sync")
        return {"n": 1}

    graph = StateGraph(Counted)
    graph.add_node("only", RunnableCallable(func, afunc, name="only", trace=False))
    graph.add_edge(START, "only")
    compiled = graph.compile()
    compiled.invoke({"n": 0})
    import asyncio

    asyncio.run(compiled.ainvoke({"n": 0}))
    assert seen == ["sync", "async"]


def test_the_injected_arguments_helper_finds_the_runtime_the_state_the_call_id_and_the_store():
    @tool
    def spy(
        query: str,
        runtime: ToolRuntime,
        state: Annotated[dict, InjectedState],
        cart: Annotated[list, InjectedState("cart")],
        call_id: Annotated[str, InjectedToolCallId],
        store: Annotated[Any, InjectedStore()],
        note: Annotated[str, InjectedState("note")] = "",
    ) -> str:
        """Look."""
        return query

    found = get_all_injected_args(spy)
    assert found.state == {"state": None, "cart": "cart", "note": "note"}
    assert found._optional_state_args == {"note"}
    assert found.runtime == "runtime"
    assert found.store == "store"
    assert set(found.all_injected_keys) == {"runtime", "state", "cart", "call_id", "store", "note"}


def test_the_batch_messages_reducer_replaces_by_id_removes_and_appends():
    old = [HumanMessage("task", id="1"), AIMessage("draft", id="2")]
    batches = [[AIMessage("final", id="2")], [RemoveMessage(id="1"), AIMessage("more", id="3")]]
    merged = messages_delta_reducer(old, batches)
    assert [(m.id, m.content) for m in merged] == [("2", "final"), ("3", "more")]


class Listed(TypedDict):
    items: Annotated[
        list[int], DeltaChannel(lambda old, batches: old + [x for b in batches for x in b], snapshot_frequency=3)
    ]


def test_a_delta_channel_stores_snapshots_as_prune_reads_and_writes_them(tmp_path):
    graph = StateGraph(Listed)
    graph.add_node("add", lambda state: {"items": [len(state["items"])]})
    graph.add_conditional_edges("add", lambda state: "add" if len(state["items"]) < 7 else "__end__")
    graph.add_edge(START, "add")
    saver = sqlite_checkpointer(tmp_path / "runs.sqlite")  # prune writes SQLite's checkpoints as `put` does
    compiled, thread = graph.compile(checkpointer=saver), new_thread()
    compiled.invoke({"items": []}, thread)
    history = list(saver.list(thread))
    stored = [item.checkpoint["channel_values"].get("items") for item in history]
    counted = [item.metadata.get(DELTA_COUNTERS_KEY, {}) for item in history]
    # Some checkpoints hold the whole value as a snapshot, the others only count the writes since one.
    snapshots = [value for value in stored if value is not None]
    assert snapshots and all(isinstance(value, DeltaSnapshot) for value in snapshots)
    assert any("items" in counters for counters in counted)
    # What prune writes into a checkpoint (a snapshot of the value) is read back as the channel's value.
    latest = saver.get_tuple(thread)
    checkpoint = {
        **latest.checkpoint,
        "channel_values": {**latest.checkpoint["channel_values"], "items": DeltaSnapshot([9])},
    }
    saver.put(latest.parent_config or thread, checkpoint, latest.metadata, {})
    assert compiled.get_state(thread).values["items"] == [9]


def test_a_compiled_graph_rebuilt_from_its_fields_runs_as_the_original():
    graph = _two_steps(lambda state: {"n": state["n"] + 1}, lambda state: {"n": state["n"] * 10})
    rebuilt = type(graph)(**compiled_graph_fields(graph))
    assert rebuilt.invoke({"n": 1}, new_thread()) == graph.invoke({"n": 1}, new_thread()) == {"n": 20}
    assert rebuilt.get_graph().draw_mermaid() == graph.get_graph().draw_mermaid()
