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
from typing import Any

from langchain_core.runnables import RunnableConfig

__all__ = ["ORIGINALS", "as_shipped", "install", "installed", "uninstall"]

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
