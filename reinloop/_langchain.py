"""What LangChain's `BaseTool.invoke` and chat model calls work out on every call, worked out once per function
and schema.

Each call of a LangChain tool resolves its function's signature and type hints three or four times (does `_run`
take a run manager? which parameter wants the `RunnableConfig`? does `func` take callbacks?) and the
annotations of its argument schema twice (which arguments are injected?): about 150 us of a 155 us call of a
tool that adds two numbers, and four times that on a cold cache in a worker thread. The answers depend only on
the function or the schema class, so reinloop keeps them: `install()` replaces the helpers LangChain's tool
modules call (`_signature_parameters`, `_get_runnable_config_param`, `get_all_basemodel_annotations`) with
memoized forms of themselves, keyed weakly on the function or class. A chat model's `invoke` asks the first of
them whether its `_generate` takes a run manager, on every call (10-15 us of a 130 us call of a fake model):
its module gets the same memoized helper.

What is kept is exactly what LangChain would work out again, with three limits that keep it so:
- only plain functions, methods (by their function) and finished Pydantic v2 models are kept; a partial, a
  callable object or a model with unresolved forward references is worked out on every call, as before;
- a failure to resolve type hints (a forward reference not defined yet) is not kept: the next call tries again;
- a function whose signature or annotations are changed after its tool's first call is not seen to change.
The helpers are private names: if the installed langchain-core lacks one, or gives it another shape, nothing
is replaced (tools work as LangChain has them, only slower). `tests/test_tool_helpers.py` checks the answers match.
"""

from __future__ import annotations

import inspect
import logging
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config, set_config_context

__all__ = ["LOUD", "ORIGINALS", "as_shipped", "install", "installed", "invoke_quietly", "unheard", "uninstall"]

logger = logging.getLogger(__name__)

# The modules whose globals name the helpers, and the helpers each one calls per tool call.
_PATCHED = {
    "langchain_core.tools.base": (
        "_signature_parameters",
        "_get_runnable_config_param",
        "get_all_basemodel_annotations",
    ),
    "langchain_core.tools.structured": ("_signature_parameters", "_get_runnable_config_param"),
    "langchain_core.tools.simple": ("_signature_parameters", "_get_runnable_config_param"),
    "langchain_core.language_models.chat_models": ("_signature_parameters",),
}

_Parameters = Mapping[str, inspect.Parameter]
_MISSING = object()
_installed = False
# The helpers as langchain-core has them, by name, once `install` has replaced them.
ORIGINALS: dict[str, Callable[..., Any]] = {}
_MADE: dict[str, Callable[..., Any]] = {}  # the memoized ones, by name


def _function_key(obj: Any) -> tuple[types.FunctionType, bool] | None:
    """What a callable's signature and hints depend on: its function, and whether it is bound (a bound method's
    signature lacks the first parameter); None for a callable whose answers are not kept."""
    if type(obj) is types.FunctionType:
        return obj, False
    if type(obj) is types.MethodType and type(obj.__func__) is types.FunctionType:
        return obj.__func__, True
    return None


class _Memo:
    """Answers per function (plain or bound), held while the function lives."""

    def __init__(self) -> None:
        self.plain: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self.bound: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def get(self, key: tuple[types.FunctionType, bool]) -> Any:
        function, bound = key
        return (self.bound if bound else self.plain).get(function, _MISSING)

    def put(self, key: tuple[types.FunctionType, bool], value: Any) -> None:
        function, bound = key
        (self.bound if bound else self.plain)[function] = value


def _signature_parameters(original: Callable[[Any], _Parameters]) -> Callable[[Any], _Parameters]:
    memo = _Memo()

    def signature_parameters(obj: Callable[..., Any]) -> _Parameters:
        key = _function_key(obj)
        if key is None:
            return original(obj)
        found = memo.get(key)
        if found is _MISSING:
            found = types.MappingProxyType(dict(original(obj)))
            memo.put(key, found)
        return found  # type: ignore[no-any-return]

    return signature_parameters


def _runnable_config_param(hints_of: Callable[[Any], dict[str, Any] | None]) -> Callable[[Any], str | None]:
    memo = _Memo()

    def get_runnable_config_param(func: Callable[..., Any]) -> str | None:
        key = _function_key(func)
        found: Any = _MISSING if key is None else memo.get(key)
        if found is not _MISSING:
            return found  # type: ignore[no-any-return]
        hints = hints_of(func)
        name = next((name for name, type_ in (hints or {}).items() if type_ is RunnableConfig), None)
        if key is not None and hints is not None:  # hints that failed to resolve are tried again next call
            memo.put(key, name)
        return name

    return get_runnable_config_param


def _basemodel_annotations(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    memo: weakref.WeakKeyDictionary[type, dict[bool, dict[str, Any]]] = weakref.WeakKeyDictionary()

    def get_all_basemodel_annotations(cls: Any, *, default_to_bound: bool = True) -> dict[str, Any]:
        if not (isinstance(cls, type) and cls.__dict__.get("__pydantic_complete__") is True):
            return original(cls, default_to_bound=default_to_bound)
        kept = memo.setdefault(cls, {})
        if default_to_bound not in kept:
            kept[default_to_bound] = original(cls, default_to_bound=default_to_bound)
        return dict(kept[default_to_bound])  # a copy: a caller may change what it is given

    return get_all_basemodel_annotations


def _shapes_fit(modules: Mapping[str, types.ModuleType]) -> bool:
    base = modules["langchain_core.tools.base"]
    for module_name, names in _PATCHED.items():
        if not all(callable(getattr(modules[module_name], name, None)) for name in names):
            return False
    hints = getattr(base, "_get_type_hints", None)
    annotations = inspect.signature(base.get_all_basemodel_annotations).parameters
    return callable(hints) and list(annotations) == ["cls", "default_to_bound"]


def install() -> bool:
    """Replace LangChain's per-call tool helpers with their memoized forms, once per process; False when the
    installed langchain-core has not got them as reinloop knows them (nothing is replaced then)."""
    global _installed
    if _installed:
        return True
    if _MADE:  # installed before, then uninstalled
        _put(_modules(), _MADE)
        _installed = True
        return True
    modules = _modules()
    if not _shapes_fit(modules):
        logger.debug("langchain-core's tool helpers have changed: tool calls are not sped up")
        return False
    base = modules["langchain_core.tools.base"]
    ORIGINALS.update({name: getattr(base, name) for name in _PATCHED["langchain_core.tools.base"]})
    made = {
        "_signature_parameters": _signature_parameters(base._signature_parameters),
        "_get_runnable_config_param": _runnable_config_param(base._get_type_hints),
        "get_all_basemodel_annotations": _basemodel_annotations(base.get_all_basemodel_annotations),
    }
    _MADE.update(made)
    _put(modules, made)
    _installed = True
    return True


def uninstall() -> None:
    """Give LangChain's tool modules their own helpers back (the benchmarks time LangChain's agents as they
    ship); `install` puts the memoized ones back, with what they had kept."""
    global _installed
    if _installed:
        _put(_modules(), ORIGINALS)
        _installed = False


@contextmanager
def as_shipped() -> Iterator[None]:
    """While the block runs, LangChain's tools work out what they need on every call, as LangChain ships them
    (the benchmarks time LangChain's own agents so); then as before."""
    was = _installed
    uninstall()
    try:
        yield
    finally:
        if was:
            install()


def _modules() -> dict[str, types.ModuleType]:
    import importlib

    return {name: importlib.import_module(name) for name in _PATCHED}


def _put(modules: Mapping[str, types.ModuleType], helpers: Mapping[str, Callable[..., Any]]) -> None:
    for module_name, names in _PATCHED.items():
        for name in names:
            setattr(modules[module_name], name, helpers[name])


def installed() -> bool:
    """Whether LangChain's tool helpers are the memoized ones."""
    return _installed


# What `invoke_quietly` returns when the call must go through `BaseTool.invoke` (nothing was called).
LOUD: Any = object()


def invoke_quietly(tool: Any, tool_input: dict[str, Any], config: RunnableConfig | None) -> Any:
    """Call a `StructuredTool` as `BaseTool.invoke` would, without its callback manager, when no callback
    handler would see the call; `LOUD` (and nothing called) otherwise.

    `BaseTool.run` configures a callback manager, announces the run to it and reports its end: about a third of a
    small tool's call, spent for no one when no handler is configured. Skipped only when all of these hold, so that
    every handler, tracer, run collector and debug printer that would see the call still does:
    - the tool is a plain `StructuredTool` with a sync function that takes no `callbacks`, no `callbacks` or
      `verbose` of its own, LangChain's error handling off (reinloop's runners have it off: `reinloop.tools.registry`)
      and `response_format="content"`; the input is arguments, not a ToolCall;
    - `config` carries a callback manager with no handlers, inheritable or not (under LangGraph the run's tracers
      and handlers are inherited by every node's manager);
    - LangChain debug is off, LangSmith tracing is off (environment, context, a run tree), and no configure hook
      (a run collector, a usage callback) is active.
    What runs then is `BaseTool.run`'s own path: its argument parsing and injected-argument filtering
    (`_to_args_and_kwargs`), the tool's `_run` with the caller's config, in a copy of the context that carries the
    child config (nested runnables see the same config), and its exceptions raised as they are.
    """
    if not _quiet(tool, tool_input, config):
        return LOUD
    assert config is not None
    child_config = patch_config(config, callbacks=cast(BaseCallbackManager, config["callbacks"]))
    with set_config_context(child_config) as context:
        args, kwargs = tool._to_args_and_kwargs(tool_input, None)
        return context.run(tool._run, *args, config=config, **kwargs)


def _quiet(tool: Any, tool_input: dict[str, Any], config: RunnableConfig | None) -> bool:
    """Whether `invoke_quietly` may call `tool` without its callback manager (see there)."""
    if _LANGCHAIN_PARTS is None or type(tool) is not _LANGCHAIN_PARTS.structured_tool or config is None:
        return False
    if tool.callbacks or tool.verbose or tool.handle_tool_error or tool.handle_validation_error:
        return False
    if tool.response_format != "content" or not isinstance(tool_input, dict) or tool_input.get("type") == "tool_call":
        return False
    func = tool.func
    # The question StructuredTool._run asks, through the helper it calls (memoized while `install`ed).
    if type(func) is not types.FunctionType or "callbacks" in _LANGCHAIN_PARTS.structured._signature_parameters(func):
        return False
    return unheard(config)


def unheard(config: RunnableConfig | None) -> bool:
    """Whether no callback handler would see a run started under `config`: it carries a callback manager with no
    handlers, inheritable or not (under LangGraph the run's tracers and handlers are inherited by every node's
    manager), LangChain debug is off, LangSmith tracing is off (environment, context, a run tree), and no configure
    hook (a run collector, a usage callback) is active. False when it cannot tell."""
    if _LANGCHAIN_PARTS is None or config is None:
        return False
    manager = config.get("callbacks")
    if not isinstance(manager, _LANGCHAIN_PARTS.base_callback_manager):
        return False
    if manager.handlers or manager.inheritable_handlers:
        return False
    return not _LANGCHAIN_PARTS.something_listens()


class _Parts:
    """The LangChain names `invoke_quietly` relies on, looked up once; None when one is missing."""

    def __init__(self) -> None:
        from langchain_core.callbacks.base import BaseCallbackManager
        from langchain_core.globals import get_debug
        from langchain_core.tools import StructuredTool, structured
        from langchain_core.tracers import context as tracer_context
        from langchain_core.utils.env import env_var_is_set
        from langsmith.run_helpers import get_current_run_tree

        self.structured_tool = StructuredTool
        self.base_callback_manager = BaseCallbackManager
        self.structured = structured
        self._get_debug = get_debug
        self._tracing_enabled = tracer_context._tracing_v2_is_enabled
        self._hooks = tracer_context._configure_hooks
        self._env_var_is_set = env_var_is_set
        self._run_tree = get_current_run_tree

    def something_listens(self) -> bool:
        """Whether LangChain's callback configuration would add a handler of its own to a tool's run."""
        if self._get_debug() or self._tracing_enabled() or self._run_tree() is not None:
            return True
        if self._env_var_is_set("LANGCHAIN_TRACING") or self._env_var_is_set("LANGCHAIN_HANDLER"):
            return True  # BaseTool.run raises on the old tracer's variable: it must get to say so
        return any(var.get() is not None or (env and self._env_var_is_set(env)) for var, _, _, env in self._hooks)


def _langchain_parts() -> _Parts | None:
    try:
        parts = _Parts()
    except (ImportError, AttributeError):
        logger.debug("langchain-core's callback internals have changed: tools always run with their callbacks")
        return None
    tool_run = getattr(parts.structured_tool, "_run", None)
    if tool_run is None or "config" not in inspect.signature(tool_run).parameters:
        return None
    if not callable(getattr(parts.structured_tool, "_to_args_and_kwargs", None)):
        return None
    if not callable(getattr(parts.structured, "_signature_parameters", None)):
        return None
    return parts


_LANGCHAIN_PARTS = _langchain_parts()
