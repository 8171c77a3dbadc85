"""The import graph of a package, read from its source: which of its modules each module
imports, and the cycles of that graph.

A small AST walk: every ``import``/``from ... import`` of a module of the same package counts,
inside functions too, except those under ``if TYPE_CHECKING:`` (annotations only). The
architecture tests read it (``tests/architecture``), and hold a package to its layers and its
groups (targets, engine families) to their seams with ``layer_violations``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module names of the package at ``root`` (a directory with ``__init__.py``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements of ``tree`` at any depth, skipping ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports_of(child)
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.append(submodule if submodule in modules else source)
            for target in targets:
                # ``import a.b.c`` names a.b.c; the closest module of the package counts.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a path whose first and last entries are the same, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == 1:
                return [*path[path.index(successor) :], successor]
            if successor not in state:
                found = visit(successor)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


#: A package's layers, earliest first: (name, the modules and packages it is made of).
Layers = list[tuple[str, list[str]]]


def layer_of(module: str, layers: Layers) -> int:
    """The index in ``layers`` of the layer ``module`` belongs to (its longest prefix; the
    package's root module, a prefix without a dot, is only itself)."""
    best, length = -1, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            matches = module == prefix or ("." in prefix and module.startswith(prefix + "."))
            if matches and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def layer_violations(
    graph: dict[str, set[str]],
    layers: Layers,
    group_of: Callable[[str], str | None],
    seams: Mapping[str, Mapping[str, str]],
    group: str,
    seams_name: str,
) -> list[str]:
    """Every import of ``graph`` that the layers forbid (a module imports its own layer and
    earlier ones), or that goes from one group (``group_of``: a target, an engine family) into
    another outside the importing group's ``seams``, as a sentence."""
    found = []
    for module, imported in sorted(graph.items()):
        layer = layer_of(module, layers)
        if layer < 0:
            found.append(f"{module} belongs to no layer (add it to LAYERS)")
            continue
        for other in sorted(imported):
            other_layer = layer_of(other, layers)
            if other_layer > layer:
                found.append(
                    f"{module} ({layers[layer][0]}) imports {other} ({layers[other_layer][0]}), "
                    "a later layer"
                )
            mine, theirs = group_of(module), group_of(other)
            allowed = seams.get(mine, {}) if mine is not None else {}
            if (
                mine is not None
                and theirs is not None
                and mine != theirs
                and not any(other == s or other.startswith(s + ".") for s in allowed)
            ):
                found.append(
                    f"{module} ({group} {mine}) imports {other} ({group} {theirs}), "
                    f"outside {seams_name}"
                )
    return found
