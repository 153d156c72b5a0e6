"""The package's import graph: the loop never imports its layers (CLI, inspector, evaluation), and no two modules
import each other, directly or round a circle, when they load (imports for type checking only aside)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "reinloop"
LAYERS = ("reinloop.cli", "reinloop.eval", "reinloop.inspect")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
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


def _part(module: str) -> str:
    """The part of the package a module belongs to: `reinloop.guards` for `reinloop.guards.repeats`."""
    return ".".join(module.split(".")[:2])


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


def test_no_module_imports_a_private_name_from_another_part_of_the_package() -> None:
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("reinloop"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                if private and _part(node.module) != _part(module):
                    found.append(f"{module}: from {node.module} import {', '.join(private)}")
    assert found == []


def test_the_inspector_reads_no_command_line() -> None:
    inspector = [name for name in MODULES if _layer(name) == "reinloop.inspect"]
    assert all("argparse" not in MODULES[name].read_text() for name in inspector)


# What `import reinloop` loads today: a bound a new eager import breaks (issue 45 aims at about 35).
LOADED_AT_IMPORT = 74


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
