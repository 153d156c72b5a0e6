"""LangChain's per-call tool helpers, memoized by `reinloop._langchain`: the same answers as LangChain's own,
worked out once, and tools that behave as they did."""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any

import langchain_core.language_models.chat_models as chat_models
import langchain_core.tools.base as tools_base
import langchain_core.tools.simple as tools_simple
import langchain_core.tools.structured as tools_structured
import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManager, CallbackManagerForToolRun
from langchain_core.globals import set_debug
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig, RunnableLambda, ensure_config
from langchain_core.tools import (
    BaseTool,
    InjectedToolArg,
    InjectedToolCallId,
    StructuredTool,
    Tool,
    ToolException,
    tool,
)
from langchain_core.tracers.context import collect_runs
from langsmith import tracing_context
from langsmith.utils import get_env_var
from pydantic import BaseModel

from reinloop import _langchain
from reinloop.testing import ScriptedChatModel
from reinloop.tools.outcomes import invoke_tool

ORIGINAL = _langchain.ORIGINALS


def test_installed_when_reinloop_runs_tools() -> None:
    assert _langchain.installed()
    for module in (tools_base, tools_structured, tools_simple):
        assert module._signature_parameters is not ORIGINAL["_signature_parameters"]
        assert module._get_runnable_config_param is not ORIGINAL["_get_runnable_config_param"]
    assert tools_base.get_all_basemodel_annotations is not ORIGINAL["get_all_basemodel_annotations"]
    assert chat_models._signature_parameters is tools_base._signature_parameters
    assert _langchain.install()  # once: a second call replaces nothing again


class _RunManagerModel(ScriptedChatModel):
    """A chat model whose `_generate` may or may not take a run manager: LangChain passes one only if it does."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        text = "with a run manager" if run_manager is not None else "without"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


class _PlainModel(ScriptedChatModel):
    def _generate(self, messages: Any, stop: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("plain"))])


def test_chat_models_get_a_run_manager_exactly_when_their_generate_takes_one() -> None:
    for _ in range(2):  # the first call works it out, the second finds it kept
        assert _RunManagerModel(replies=[]).invoke("hi").content == "with a run manager"
        assert _PlainModel(replies=[]).invoke("hi").content == "plain"


def test_as_shipped_gives_langchain_its_helpers_back_for_a_while() -> None:
    with _langchain.as_shipped():
        assert not _langchain.installed()
        assert tools_structured._get_runnable_config_param is ORIGINAL["_get_runnable_config_param"]
        assert tools_base.get_all_basemodel_annotations is ORIGINAL["get_all_basemodel_annotations"]
        assert invoke_tool(StructuredTool.from_function(_with_config, name="w", description="d"), {"a": 5}) == 5
    assert _langchain.installed()
    assert tools_structured._get_runnable_config_param is not ORIGINAL["_get_runnable_config_param"]


def _with_config(a: int, config: RunnableConfig, *, callbacks: Any = None) -> int:
    return a


class _Holder:
    def method(self, a: int, settings: RunnableConfig) -> int:
        return a

    def __call__(self, a: int, config: RunnableConfig) -> int:
        return a


CALLABLES = {
    "function": _with_config,
    "bound method": _Holder().method,
    "function of the method": _Holder.method,
    "partial": functools.partial(_with_config, 1),
    "callable object": _Holder(),
    "no hints": lambda a, b: a,
}


@pytest.mark.parametrize("name", list(CALLABLES))
def test_signatures_and_config_params_match_langchain(name: str) -> None:
    func = CALLABLES[name]
    for _ in range(2):  # the first call works it out, the second finds it kept
        assert dict(tools_base._signature_parameters(func)) == dict(ORIGINAL["_signature_parameters"](func))
        assert tools_base._get_runnable_config_param(func) == ORIGINAL["_get_runnable_config_param"](func)


def test_a_bound_method_and_its_function_are_kept_apart() -> None:
    assert list(tools_base._signature_parameters(_Holder().method)) == ["a", "settings"]
    assert list(tools_base._signature_parameters(_Holder.method)) == ["self", "a", "settings"]


def test_hints_that_fail_to_resolve_are_tried_again() -> None:
    # A forward reference to a name defined later: LangChain finds no config parameter until it resolves.
    def late(a: int, config: LaterConfig) -> int:  # type: ignore[name-defined]  # noqa: F821
        return a

    assert tools_base._get_runnable_config_param(late) is None
    sys.modules[__name__].LaterConfig = RunnableConfig  # type: ignore[attr-defined]
    try:
        assert tools_base._get_runnable_config_param(late) == "config"
    finally:
        del sys.modules[__name__].LaterConfig  # type: ignore[attr-defined]


class _Args(BaseModel):
    a: int
    note: Annotated[str, InjectedToolArg]
    call_id: Annotated[str, InjectedToolCallId]


def test_schema_annotations_match_langchain_and_are_copies() -> None:
    first = tools_base.get_all_basemodel_annotations(_Args)
    assert first == ORIGINAL["get_all_basemodel_annotations"](_Args)
    first.clear()  # a caller that changes what it was given changes nothing kept
    assert tools_base.get_all_basemodel_annotations(_Args) == ORIGINAL["get_all_basemodel_annotations"](_Args)
    unbound = tools_base.get_all_basemodel_annotations(_Args, default_to_bound=False)
    assert unbound == ORIGINAL["get_all_basemodel_annotations"](_Args, default_to_bound=False)


def test_an_unfinished_model_is_worked_out_every_call() -> None:
    class Node(BaseModel):
        child: Later | None = None  # type: ignore[name-defined]  # noqa: F821

    assert not Node.__pydantic_complete__
    assert tools_base.get_all_basemodel_annotations(Node) == {}  # LangChain finds no fields in it yet
    sys.modules[__name__].Later = int  # type: ignore[attr-defined]
    try:
        Node.model_rebuild()
        assert Node.__pydantic_complete__
        assert set(tools_base.get_all_basemodel_annotations(Node)) == {"child"}
    finally:
        del sys.modules[__name__].Later  # type: ignore[attr-defined]


# tools behave as LangChain has them -------------------------------------------------------------------


class _Seen(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("start")

    def on_tool_end(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("end")


def test_tools_get_config_callbacks_run_managers_and_injected_arguments() -> None:
    seen: dict[str, Any] = {}

    @tool
    def configured(a: int, config: RunnableConfig) -> int:
        """Uses its config."""
        seen["config"] = config["metadata"]["who"]
        return a

    def with_callbacks(a: int, callbacks: Any = None) -> int:
        seen["callbacks"] = callbacks is not None
        return a

    @tool
    def injected(a: int, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Sees its call's id."""
        return f"{a} {call_id}"

    class Managed(BaseTool):
        name: str = "managed"
        description: str = "Sees its run manager."

        def _run(self, a: int, run_manager: CallbackManagerForToolRun | None = None) -> str:
            return type(run_manager).__name__

    handler = _Seen()
    config: RunnableConfig = {"metadata": {"who": "me"}, "callbacks": [handler]}
    for _ in range(2):
        assert invoke_tool(configured, {"a": 1}, config) == 1
        assert invoke_tool(StructuredTool.from_function(with_callbacks, name="cb", description="d"), {"a": 2}, config)
        assert invoke_tool(Managed(), {"a": 3}, config) == "CallbackManagerForToolRun"
        call = {"type": "tool_call", "name": "injected", "args": {"a": 4}, "id": "call-7"}
        assert invoke_tool(injected, call, config).content == "4 call-7"  # type: ignore[arg-type]
        assert invoke_tool(Tool(name="plain", description="d", func=lambda text: text.upper()), {"text": "x"}) == "X"
    assert seen == {"config": "me", "callbacks": True}
    assert handler.events.count("start") == handler.events.count("end") == 8


def test_functions_are_not_kept_alive() -> None:
    import gc
    import weakref

    def short_lived(a: int, config: RunnableConfig) -> int:
        return a

    tools_base._signature_parameters(short_lived)
    tools_base._get_runnable_config_param(short_lived)
    tools_base._signature_parameters(_Holder().method)
    gone = weakref.ref(short_lived)
    del short_lived
    gc.collect()
    assert gone() is None


# tools called without their callback manager when nothing listens ----------------------------------------


def _quiet_config(**configurable: Any) -> RunnableConfig:
    """A node's config as LangGraph gives it when no handler is configured: a callback manager without handlers."""
    return {"callbacks": CallbackManager(handlers=[]), "metadata": {"who": "me"}, "tags": ["t"],
            "configurable": {"thread_id": "th", **configurable}}  # fmt: skip


class _Point(BaseModel):
    x: int
    y: int = 0


@tool
def _shapes(count: int, label: str = "n", point: _Point | None = None, flags: list[bool] | None = None) -> str:
    """Shows what it was given, with the types pydantic gave it."""
    shown = point if point is None else (type(point).__name__, point.x, point.y)
    return repr((count, label, shown, flags))


@tool
def _sees_its_config(a: int, config: RunnableConfig) -> str:
    """Reports its config, and what a nested runnable finds in the context."""
    nested = RunnableLambda(lambda _: ensure_config()).invoke(None)
    return repr((a, config["configurable"]["thread_id"], nested["configurable"].get("thread_id"), nested["tags"]))


@tool
def _fails(kind: str) -> str:
    """Raises what it is asked to."""
    if kind == "tool":
        raise ToolException("the tool says no")
    raise ValueError("a bug")


@tool
def _no_args() -> str:
    """Takes nothing."""
    return "nothing"


QUIET_CASES = {
    "coerced and defaulted": (_shapes, {"count": "3", "point": {"x": "1"}, "flags": ["true", 0]}),
    "only what was given": (_shapes, {"count": 2}),
    "config and context": (_sees_its_config, {"a": 1}),
    "no arguments": (_no_args, {}),
    "a tool error": (_fails, {"kind": "tool"}),
    "a bug": (_fails, {"kind": "bug"}),
    "invalid arguments": (_shapes, {"count": "many"}),
}


def _outcome(call: Any) -> Any:
    try:
        return ("value", call())
    except Exception as exc:
        return ("raised", type(exc), str(exc))


@pytest.mark.parametrize("name", list(QUIET_CASES))
def test_a_quiet_call_gives_what_langchain_gives(name: str) -> None:
    lc_tool, args = QUIET_CASES[name]
    config = _quiet_config()
    assert _langchain._quiet(lc_tool, args, config)
    assert _outcome(lambda: _langchain.invoke_quietly(lc_tool, dict(args), config)) == _outcome(
        lambda: lc_tool.invoke(dict(args), config)
    )


def test_a_quiet_call_configures_no_callback_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("configured a callback manager")

    monkeypatch.setattr(CallbackManager, "configure", refuse)
    assert invoke_tool(_shapes, {"count": 1}, _quiet_config()) == repr((1, "n", None, None))
    with pytest.raises(AssertionError, match="configured"):  # a handler listens: LangChain's own path
        invoke_tool(_shapes, {"count": 1}, {**_quiet_config(), "callbacks": CallbackManager(handlers=[_Seen()])})


def test_every_listener_still_sees_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = _Seen()
    managers = [CallbackManager(handlers=[handler]), CallbackManager(handlers=[], inheritable_handlers=[handler])]
    for callbacks in [*managers, [handler]]:
        config: RunnableConfig = {**_quiet_config(), "callbacks": callbacks}
        assert not _langchain._quiet(_shapes, {"count": 1}, config)
        assert invoke_tool(_shapes, {"count": 1}, config) == repr((1, "n", None, None))
    # LangChain tells an inheritable-only handler of the tool's children, not of the tool's own run.
    assert handler.events == ["start", "end"] * 2
    with collect_runs() as collector:  # a configure hook: the run collector
        invoke_tool(_shapes, {"count": 1}, _quiet_config())
    assert [run.name for run in collector.traced_runs] == ["_shapes"]
    assert not _langchain._quiet(_shapes.model_copy(update={"callbacks": [handler]}), {"count": 1}, _quiet_config())
    assert not _langchain._quiet(_shapes.model_copy(update={"verbose": True}), {"count": 1}, _quiet_config())
    set_debug(True)
    try:
        assert not _langchain._quiet(_shapes, {"count": 1}, _quiet_config())
    finally:
        set_debug(False)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    get_env_var.cache_clear()  # LangSmith reads its variables once, for LangChain's path and this one alike
    try:
        assert not _langchain._quiet(_shapes, {"count": 1}, _quiet_config())
    finally:
        monkeypatch.delenv("LANGSMITH_TRACING")
        get_env_var.cache_clear()
    with tracing_context(enabled=True):
        assert not _langchain._quiet(_shapes, {"count": 1}, _quiet_config())


def test_other_tools_and_inputs_take_langchain_s_path() -> None:
    config = _quiet_config()

    def with_callbacks(a: int, callbacks: Any = None) -> int:
        return a

    loud = {
        "callbacks parameter": (StructuredTool.from_function(with_callbacks, name="cb", description="d"), {"a": 1}),
        "handles its errors": (_fails.model_copy(update={"handle_tool_error": True}), {"kind": "tool"}),
        "handles bad arguments": (_shapes.model_copy(update={"handle_validation_error": True}), {"count": "x"}),
        "artifact": (_shapes.model_copy(update={"response_format": "content_and_artifact"}), {"count": 1}),
        "a ToolCall": (_shapes, {"type": "tool_call", "name": "_shapes", "args": {"count": 1}, "id": "c1"}),
        "not a StructuredTool": (Tool(name="plain", description="d", func=lambda text: text), {"text": "x"}),
    }
    for name, (lc_tool, args) in loud.items():
        assert not _langchain._quiet(lc_tool, args, config), name
        assert _langchain.invoke_quietly(lc_tool, args, config) is _langchain.LOUD, name
    assert not _langchain._quiet(_shapes, {"count": 1}, None)
    assert invoke_tool(loud["handles its errors"][0], {"kind": "tool"}, config) == "the tool says no"
