"""The import graph: the loop never imports its layers (the CLI, the inspector, and the evaluation, `reinloop_eval`,
which the CLI loads only when its `eval` command runs); the evaluation imports only the loop's public names; and no
two modules import each other, directly or round a circle, when they load (imports for type checking only aside)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
EVALUATION = "reinloop_eval"
LAYERS = ("reinloop.cli", "reinloop.inspect", EVALUATION)


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*(ROOT / "reinloop").rglob("*.py"), *(ROOT / EVALUATION).rglob("*.py")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


MODULES = _modules()


def _imported(node: ast.AST, module: str) -> set[str]:
    """The reinloop modules an import statement names (a `from X import Y` names X, and X.Y if Y is a module)."""
    names: set[str] = set()
    if isinstance(node, ast.ImportFrom) and node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        names.add(f"{base}.{node.module}" if node.module else base)
    elif isinstance(node, ast.ImportFrom) and node.module:
        names.add(node.module)
        names |= {f"{node.module}.{alias.name}" for alias in node.names}
    elif isinstance(node, ast.Import):
        names |= {alias.name for alias in node.names}
    return {name for name in names if name in MODULES and name != module}


def _at_load(module: str) -> set[str]:
    """What `module` imports when it loads: its top-level imports, those under a top-level try or if but not
    `if TYPE_CHECKING:`."""
    found: set[str] = set()
    statements = list(ast.parse(MODULES[module].read_text()).body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            statements += node.body + node.orelse
        elif isinstance(node, ast.Try):
            statements += node.body + [s for handler in node.handlers for s in handler.body] + node.orelse
        found |= _imported(node, module)
    return found


def _anywhere(module: str) -> set[str]:
    return {name for node in ast.walk(ast.parse(MODULES[module].read_text())) for name in _imported(node, module)}


def _layer(module: str) -> str | None:
    return next((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), None)


@pytest.mark.parametrize(
    "module", sorted(name for name in MODULES if _layer(name) is None and name != "reinloop.__main__")
)
def test_the_loop_never_imports_the_cli_the_inspector_or_the_evaluation(module: str) -> None:
    assert {name for name in _anywhere(module) if _layer(name)} == set()


def test_the_cli_loads_the_evaluation_only_when_its_eval_command_runs() -> None:
    import subprocess
    import sys

    loaded = {module: sorted(n for n in _at_load(module) if _layer(n) == EVALUATION) for module in MODULES}
    assert {module: names for module, names in loaded.items() if names and _layer(module) != EVALUATION} == {}
    code = (
        "import sys; from reinloop.cli.parser import build_parser; parse = build_parser().parse_args; "
        "parse(['graph']); before = 'reinloop_eval' in sys.modules; parse(['eval']); "
        "print(before, 'reinloop_eval' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "True"]


def _public(module: str, name: str | None) -> bool:
    """Whether `from module import name` (or `import module`, with no name) names only the loop's public API: no
    module or name with a leading underscore, and a name in its module's `__all__` when the module has one."""
    if any(part.startswith("_") for part in module.split(".")) or (name or "").startswith("_"):
        return False
    if name is None or f"{module}.{name}" in MODULES:
        return True
    if module not in MODULES:
        return False
    exported = [
        ast.literal_eval(node.value)
        for node in ast.parse(MODULES[module].read_text()).body
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets)
    ]
    return not exported or name in exported[0]


def _private_uses(source: str) -> list[str]:
    """The imports in `source` of the loop's names that are not its public API, wherever they stand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        loop = [(module, name) for module, name in names if module.split(".")[0] == "reinloop"]
        found += [f"{module}: {name or module}" for module, name in loop if not _public(module, name)]
    return found


@pytest.mark.parametrize(
    ("source", "private"),
    [
        ("from reinloop import AgentConfig, build_agent", []),
        ("from reinloop.memory.tokens import TokenCounter", []),
        ("import reinloop.protocols", []),
        ("from reinloop.x import _y", ["reinloop.x: _y"]),
        ("from reinloop._langgraph import RESUMING", ["reinloop._langgraph: RESUMING"]),
        ("import reinloop._langgraph", ["reinloop._langgraph: reinloop._langgraph"]),
        ("from reinloop.config import NOT_EXPORTED", ["reinloop.config: NOT_EXPORTED"]),
        ("def later():\n    from reinloop.nodes.decide import _reply", ["reinloop.nodes.decide: _reply"]),
    ],
    ids=["top-level", "in-all", "module", "private-name", "private-module", "import-private", "not-in-all", "inline"],
)
def test_a_private_use_of_the_loop_is_found(source: str, private: list[str]) -> None:
    assert _private_uses(source) == private


@pytest.mark.parametrize("module", sorted(name for name in MODULES if _layer(name) == EVALUATION))
def test_the_evaluation_imports_only_the_loops_public_names_and_no_other_layer(module: str) -> None:
    assert _private_uses(MODULES[module].read_text()) == []
    assert {name for name in _anywhere(module) if _layer(name) not in (None, EVALUATION)} == set()


def _part(module: str) -> str:
    """The part of the code a module belongs to: `reinloop.guards` for `reinloop.guards.repeats`; the evaluation
    is one part."""
    return EVALUATION if _layer(module) == EVALUATION else ".".join(module.split(".")[:2])


@pytest.mark.parametrize("part", [False, True], ids=["modules", "parts"])
def test_no_modules_import_each_other_when_they_load(part: bool) -> None:
    graph: dict[str, set[str]] = {}
    for module in MODULES:  # with `part`, each part of the package (a subpackage or a module) as one
        name = _part(module) if part else module
        graph.setdefault(name, set()).update({_part(other) if part else other for other in _at_load(module)} - {name})
    circles = []
    for start in graph:  # a path back to `start` through what it imports
        seen, paths = {start}, [[start]]
        while paths:
            path = paths.pop()
            for name in sorted(graph[path[-1]]):
                if name == start:
                    circles.append(" -> ".join([*path, start]))
                elif name not in seen:
                    seen.add(name)
                    paths.append([*path, name])
    assert circles == []


def test_no_module_imports_a_private_name_from_another_part() -> None:
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("reinloop"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                if private and _part(node.module) != _part(module):
                    found.append(f"{module}: from {node.module} import {', '.join(private)}")
    assert found == []


def test_the_inspector_reads_no_command_line_and_never_imports_the_cli() -> None:
    inspector = [name for name in MODULES if _layer(name) == "reinloop.inspect"]
    assert all("argparse" not in MODULES[name].read_text() for name in inspector)
    # Both are layers over `reinloop.runs`: the page resumes a thread as the command does, through it.
    assert [name for module in inspector for name in _anywhere(module) if _layer(name) == "reinloop.cli"] == []


# What `import reinloop` loads today: a bound a new eager import breaks (issue 45 aims at about 35).
LOADED_AT_IMPORT = 66


def test_import_reinloop_loads_the_loop_and_not_its_layers_presets_or_seed_tools() -> None:
    import subprocess
    import sys

    code = "import sys, reinloop; print(' '.join(m for m in sys.modules if m.startswith('reinloop')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = done.stdout.split()
    seeds = ("calculator", "clock", "database", "files", "financial", "search", "toolset", "translate", "weather")
    unwanted = [*LAYERS, "reinloop.presets", *(f"reinloop.tools.{name}" for name in seeds)]
    assert [name for name in loaded if any(name == u or name.startswith(u + ".") for u in unwanted)] == []
    assert len(loaded) <= LOADED_AT_IMPORT
    import reinloop  # the names load when first used

    assert callable(reinloop.default_toolset) and "seed-000" in reinloop.PRESETS and callable(reinloop.prune)
