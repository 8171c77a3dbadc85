"""The generator's modules import one another one way: no cycles, counting imports inside
functions, not counting those under ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.generator import REPO

PACKAGE = REPO / "generator" / "stratgen"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_imports(source: str, module: str, package: str) -> set[str]:
    """Modules of ``package`` that ``module`` imports anywhere in its source, functions
    included, ``if TYPE_CHECKING:`` blocks excluded."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[: -node.level]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base == package:
                found.update(f"{package}.{alias.name}" for alias in node.names)
            elif base.startswith(package + "."):
                found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(package + "."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found - {module}


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    graph = {}
    for path in sorted(folder.glob("*.py")):
        module = f"{package}.{path.stem}" if path.stem != "__init__" else package
        graph[module] = module_imports(path.read_text(encoding="utf-8"), module, package)
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "active"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "active":
                return [*stack[stack.index(dep) :], dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_walker_sees_a_cycle_through_a_function_level_import() -> None:
    sources = {
        "pkg.a": "from .b import thing\n",
        "pkg.b": "def f():\n    from . import c\n",
        "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n"
        "else:\n    from .a import y\n",
        "pkg.d": "from .a import z\n",
    }
    graph = {m: module_imports(s, m, "pkg") for m, s in sources.items()}
    assert graph["pkg.c"] == {"pkg.a"}  # the TYPE_CHECKING import is not counted
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    graph["pkg.c"] = set()
    assert find_cycle(graph) is None


def test_the_generator_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE, "stratgen")
    assert "stratgen.resolve.catalog" in graph and graph["stratgen.resolve.resolver"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
