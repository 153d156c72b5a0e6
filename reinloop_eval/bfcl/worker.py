"""BFCL's side of the bridge, run by the Python of BFCL's own environment (`bridge.Bfcl` starts it); it imports
nothing of reinloop and runs only BFCL's code: its loader, its tool conversion, its multi-turn environments and
its two checkers.

Reads one JSON request a line on stdin, writes one JSON reply a line on stdout (`{"ok": ...}` or
`{"error": ...}`):
- `load`: a category's entries as BFCL loads them (function docs with its language hint), with the tools as
  BFCL converts them for OpenAI-style function calling, the ground truth and the replay plan;
- `execute`: calls (Python call text) in a multi-turn entry's environments, kept per `run` key;
- `score_ast` and `score_multi_turn`: BFCL's AST checker and multi-turn checker on the calls a run executed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
import types
from collections.abc import Callable
from typing import Any

MULTI_TURN = "multi_turn"
WRONG_FORMAT = "ast_decoder:decoder_wrong_output_format"  # BFCL's error type for output that is no call list
OMIT = object()  # a parameter the replay leaves out: its only possible answer is BFCL's "" (optional)


def _install_model_config_stand_in() -> None:
    """The AST checker imports `bfcl_eval.constants.model_config` for one flag of the model scored,
    `underscore_to_dot` (whether to write "." as "_" in a function's name before comparing), and that module
    imports every model handler of the leaderboard with their SDKs (thirty packages, torch among them). The
    bridge records calls under BFCL's own names, so no name needs changing: a stand-in that says False for
    every model, registered before the checker loads."""
    name = "bfcl_eval.constants.model_config"
    if name in sys.modules:
        return
    stand_in = types.ModuleType(name)

    class NoRenaming(dict[str, Any]):
        def __missing__(self, model: str) -> Any:
            return types.SimpleNamespace(underscore_to_dot=False)

    stand_in.MODEL_CONFIG_MAPPING = NoRenaming()  # type: ignore[attr-defined]
    sys.modules[name] = stand_in


def _module(name: str) -> Any:
    return importlib.import_module(f"bfcl_eval.{name}")


class Worker:
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}  # by id, as loaded
        self.truths: dict[str, Any] = {}  # ground truth by id

    def load(self, category: str) -> list[dict[str, Any]]:
        utils = _module("utils")
        truths = {truth["id"]: truth["ground_truth"] for truth in utils.load_ground_truth_entry(category)}
        loaded = []
        for entry in utils.load_dataset_entry(category):
            self.entries[entry["id"]] = entry
            self.truths[entry["id"]] = truth = truths[entry["id"]]
            plan = self._multi_turn_plan(entry) if MULTI_TURN in category else [_ast_plan(truth, entry["function"])]
            loaded.append(
                {
                    "id": entry["id"],
                    "category": category,
                    "turns": [[message["content"] for message in turn] for turn in entry["question"]],
                    "functions": [function["name"] for function in entry["function"]],
                    "tools": _tools(entry["function"]),
                    "ground_truth": truth,
                    "plan": plan,
                }
            )
        return loaded

    def _multi_turn_plan(self, entry: dict[str, Any]) -> list[list[dict[str, Any]]]:
        """The ground truth's calls, turn by turn, with their positional arguments named as the environment's
        methods name them."""
        methods = {}
        modules = _module("constants.executable_backend_config").CLASS_FILE_PATH_MAPPING
        for name in entry["involved_classes"]:
            module = importlib.import_module(modules[name])
            methods.update(dict(inspect.getmembers(getattr(module, name), inspect.isfunction)))
        return [[_named(call, methods) for call in turn] for turn in self.truths[entry["id"]]]

    def execute(self, run: str, entry_id: str, calls: list[str]) -> list[str]:
        entry = self.entries[entry_id]
        results, _ = _module("eval_checker.multi_turn_eval.multi_turn_utils").execute_multi_turn_func_call(
            calls, entry["initial_config"], entry["involved_classes"], run, entry_id
        )
        return list(results)

    def score_ast(self, entry_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
        _install_model_config_stand_in()
        checker = _module("eval_checker.ast_eval.ast_checker")
        category = entry_id.rsplit("_", 1)[0]
        if not _module("utils").is_function_calling_format_output(calls):  # BFCL's runner checks this first
            return {"valid": False, "error": ["no function call"], "error_type": WRONG_FORMAT}
        language = _module("constants.enums").Language.PYTHON
        entry = self.entries[entry_id]
        result = checker.ast_checker(entry["function"], calls, self.truths[entry_id], language, category, "bridge")
        return dict(result)

    def score_multi_turn(self, run: str, entry_id: str, turns: list[list[list[str]]]) -> dict[str, Any]:
        checker = _module("eval_checker.multi_turn_eval.multi_turn_checker")
        entry = self.entries[entry_id]
        truth = self.truths[entry_id]
        result = checker.multi_turn_checker(turns, truth, entry, entry_id.rsplit("_", 1)[0], run)
        return {key: value for key, value in result.items() if key != "details"}


def _tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The functions as BFCL converts them for OpenAI-style function calling: types in JSON schema's words, "."
    in a name written "_"."""
    mapping = _module("constants.type_mappings").GORILLA_TO_OPENAPI
    style = _module("constants.enums").ModelStyle.OPENAI_COMPLETIONS
    return [tool["function"] for tool in _module("model_handler.utils").convert_to_tool(functions, mapping, style)]


def _ast_plan(truth: list[dict[str, dict[str, list[Any]]]], functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One call per function of the possible answer: each parameter the function's doc has, at its first possible
    value of the type the doc declares, else left out if optional (BFCL writes that as a possible value ""),
    else at its first value. The ground truth has values of types its doc does not allow (a null for a number,
    True for a string), and parameters the doc does not have."""
    docs = {function["name"]: function["parameters"] for function in functions}
    plan = []
    for answer in truth:
        [(name, params)] = answer.items()
        known, required = docs[name]["properties"], docs[name].get("required", [])
        args = {}
        for key, options in params.items():
            if key in known and (value := _first(options, known[key].get("type"), key in required)) is not OMIT:
                args[key] = value
        plan.append({"name": name, "args": args})
    return plan


# The Python types of BFCL's declared types (its AST checker's mapping; an integer passes for a float).
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "float": (float, int),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
}


def _first(options: list[Any], declared: str | None = None, required: bool = False) -> Any:
    """A parameter's first possible value of the `declared` type, else none if it is optional, else its first; a
    dictionary's, and each dictionary's of a list of them, picked key by key."""
    values = [option for option in options if option != ""]
    fitting = [value for value in values if _fits(value, declared)]
    if not fitting and ("" in options or not values) and not required:
        return OMIT
    chosen = (fitting or values)[0]
    if isinstance(chosen, dict):
        return _picked(chosen)
    if isinstance(chosen, list) and chosen and all(isinstance(item, dict) for item in chosen):
        return [_picked(item) for item in chosen]
    return chosen


def _fits(value: Any, declared: str | None) -> bool:
    types = PYTHON_TYPES.get(declared or "any", (object,))
    if isinstance(value, bool) and bool not in types and types != (object,):
        return False  # a bool is an int to Python, not to JSON schema
    return isinstance(value, types)


def _picked(options: dict[str, list[Any]]) -> dict[str, Any]:
    return {key: value for key, values in options.items() if (value := _first(values)) is not OMIT}


def _named(call: str, methods: dict[str, Any]) -> dict[str, Any]:
    """A ground-truth call written as Python (`sort('final_report.pdf')`) as a name and named arguments."""
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
    name = node.func.id
    positional = [ast.literal_eval(arg) for arg in node.args]
    named = {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords if keyword.arg}
    if positional:
        bound = inspect.signature(methods[name]).bind(None, *positional, **named)  # None: self
        named = {key: value for key, value in bound.arguments.items() if key != "self"}
    return {"name": name, "args": named}


def _serve() -> None:
    replies = sys.stdout
    sys.stdout = sys.stderr  # what BFCL's code prints never reaches the replies
    worker = Worker()
    operations: dict[str, Callable[[dict[str, Any]], Any]] = {
        "load": lambda r: worker.load(r["category"]),
        "execute": lambda r: worker.execute(r["run"], r["id"], r["calls"]),
        "score_ast": lambda r: worker.score_ast(r["id"], r["calls"]),
        "score_multi_turn": lambda r: worker.score_multi_turn(r["run"], r["id"], r["turns"]),
    }
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"ok": operations[request["op"]](request)}
        except Exception as exc:  # the request failed, not the worker: the caller raises it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply, default=repr) + "\n")
        replies.flush()


if __name__ == "__main__":
    _serve()
