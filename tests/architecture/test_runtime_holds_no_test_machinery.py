"""The runtime users install holds what training jobs and generated tests use, nothing of this
repository's test suite.

- No runtime module imports a module of the test tree (``tests/``: its support modules, the
  hardware stand-ins' helpers, the suite's own plugins), or names one in a string.
- Every runtime module is reached from what generated packages use: the ``stratcore`` modules
  that generated code and generated tests import, the runtime classes the contract names by
  import path, and the runtime's own commands (``python -m stratcore....``), following the
  runtime's imports. A module only this repository's tests use is not reached.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.import_graph import import_graph

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime" / "stratcore"
TESTS = REPO / "tests"
GENERATED = REPO / "generated"
#: Where the suite keeps files that are data, not modules on any path.
DATA = (("generator", "fixtures"), ("generator", "golden"))


def _test_only_names() -> set[str]:
    """Top-level names the test tree can be imported under: each folder's modules and
    packages, as pytest and the scripts the tests start put those folders on the path. The
    stand-ins of vendor packages (``tests/hardware/standins/<vendor>``) carry the real
    packages' names, which the runtime may use, so they are not test-only."""
    standins = TESTS / "hardware" / "standins"
    names = {"tests"}
    for path in TESTS.rglob("*.py"):
        relative = path.relative_to(TESTS).parts
        if relative[:2] in DATA:
            continue
        inside_package = (path.parent / "__init__.py").is_file()
        if path.parent == standins or not inside_package:
            names.add(path.stem)
    for folder in standins.iterdir():
        if (folder / "__init__.py").is_file():
            names.discard(folder.name)
    return names - {"__init__", "conftest"} | {"conftest"}


def _runtime_modules() -> dict[str, ast.Module]:
    trees = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        parts = list(path.relative_to(RUNTIME.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        trees[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return trees


def _absolute_imports(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def _dotted_strings(tree: ast.Module) -> set[str]:
    """String constants that read as import paths (``a.b`` or ``a.b:name``)."""
    pattern = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+(:\w+)?")
    return {
        node.value.split(":")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and pattern.fullmatch(node.value)
    }


def test_the_runtime_imports_and_names_nothing_of_the_test_tree() -> None:
    test_only = _test_only_names()
    assert {"tests", "standin_torch", "sitecustomize"} <= test_only, sorted(test_only)
    offending = []
    for module, tree in _runtime_modules().items():
        for name in _absolute_imports(tree) | _dotted_strings(tree):
            if name.split(".")[0] in test_only:
                offending.append(f"{module}: {name}")
    assert not offending, "the runtime uses modules of the test tree:\n" + "\n".join(offending)


def _entry_points(trees: dict[str, ast.Module]) -> set[str]:
    """Runtime modules that run as commands: a ``__main__`` module, or an
    ``if __name__ == "__main__":`` block."""
    found = set()
    for module, tree in trees.items():
        if module.endswith(".__main__"):
            found.add(module)
        for node in tree.body:
            if (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name)
                and node.test.left.id == "__name__"
            ):
                found.add(module)
    return found


def test_every_runtime_module_serves_generated_packages_or_their_commands() -> None:
    trees = _runtime_modules()
    start = {"stratcore"} | _entry_points(trees)
    for path in GENERATED.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        start |= {n for n in _absolute_imports(tree) if n.startswith("stratcore")}
    for tree in trees.values():
        start |= {n for n in _dotted_strings(tree) if n.startswith("stratcore.")}
    graph = import_graph(RUNTIME)
    reached: set[str] = set()
    todo = [name for name in start if name in graph]
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        # A package's parents run first when it is imported.
        parent = module.rpartition(".")[0]
        todo += [*graph[module], *([parent] if parent else [])]
    unreached = sorted(set(graph) - reached)
    assert not unreached, f"runtime modules no generated package or command uses: {unreached}"
