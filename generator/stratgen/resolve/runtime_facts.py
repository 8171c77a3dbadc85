"""Facts about the runtime (``stratcore``) that the generator must respect, read from its
source without importing it (importing it would import torch).

Parsing it, rather than keeping a list by hand, tells which attribute names its strategy
classes use: an option stored under such a name would shadow a method or a fact of the class.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import Strategy


@cache
def runtime_dir() -> Path:
    """The folder of the installed ``stratcore`` package."""
    import importlib.util

    spec = importlib.util.find_spec("stratcore")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("stratcore, the runtime of generated packages, is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _public_names(cls: ast.ClassDef) -> set[str]:
    """Public methods, class attributes and ``self.x`` attributes of a class."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
            names |= _self_attributes(node.body)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def _self_attributes(body: list[ast.stmt]) -> set[str]:
    """Attributes of ``self`` that the statements assign (``self.x = ...``, ``self.x += ...``,
    ``self.x: T = ...``, in tuple targets too), in nested blocks included. Only statements are
    visited, not expressions: a module's expressions hold most of its nodes."""
    names: set[str] = set()
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
            targets = [node.target]
        elif isinstance(node, ast.With | ast.AsyncWith):
            targets = [item.optional_vars for item in node.items if item.optional_vars]
        else:
            targets = []
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List):
                targets.extend(target.elts)
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                names.add(target.attr)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(getattr(node, field, ()))
    return names


@cache
def strategy_attributes() -> frozenset[str]:
    """Public attribute names of the core's strategy classes: the root, the base of each kind
    and of each wrapper (``stratcore.contract``), and every runtime class they derive from."""
    from stratcore.contract import BASES, WRAPPERS

    roots = [*BASES.values(), *(w.base for w in WRAPPERS.values() if w.base is not None)]
    names: set[str] = set()
    for module, class_name in dict.fromkeys(c for root in roots for c in class_mro(*root)):
        names |= _public_names(_class_source(module, class_name)[0])
    return frozenset(names)


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A module's statements, those of its ``if``/``try`` blocks included (not functions')."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            yield from _module_statements(node.body + node.orelse)
            for handler in node.handlers if isinstance(node, ast.Try) else ():
                yield from _module_statements(handler.body)


def _module_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Names a runtime module imports (from any block, ``TYPE_CHECKING`` ones included) or
    defines as classes, each with the module it comes from."""
    package = module.rsplit(".", 1)[0]
    known: dict[str, str] = {}
    for node in _module_statements(tree.body):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*parts, *([source] if source else [])])
            for alias in node.names:
                known.setdefault(alias.asname or alias.name, source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            known[node.name] = module
    return known


@cache
def class_annotations(
    module: str, class_name: str
) -> dict[str, tuple[str, tuple[tuple[str, str], ...]]]:
    """Class-level annotations of a core class: attribute -> (annotation source, imports it
    needs as (module, name) pairs, e.g. ('stratcore.imports', 'Requirement'))."""
    cls, known = _class_source(module, class_name)
    result: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = sorted({n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)})
            needs = tuple((known[n], n) for n in names if n in known)
            result[node.target.id] = (ast.unparse(node.annotation), needs)
    return result


def _class_source(module: str, class_name: str) -> tuple[ast.ClassDef, dict[str, str]]:
    """The definition of a runtime class, found from a module that defines it or re-exports it
    (``stratcore.launchers``), and the names its module imports or defines."""
    tree, known = _module_source(module)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node, known
    if known.get(class_name, module) == module:
        raise LookupError(f"{module} neither defines nor imports {class_name}")
    return _class_source(known[class_name], class_name)


@cache
def _module_source(module: str) -> tuple[ast.Module, dict[str, str]]:
    """A runtime module's syntax tree and the names it imports or defines, read once."""
    folder = runtime_dir().parent.joinpath(*module.split("."))
    path = folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tree, _module_names(tree, module if path.name != "__init__.py" else f"{module}.__init__")


@dataclass(frozen=True)
class Reference:
    """A class attribute whose value is a name the runtime module imports or defines."""

    module: str
    name: str


def _constant(node: ast.expr, known: dict[str, str]) -> object:
    """The value of a class attribute's source: a literal, a contract constant, or a call of
    one of the contract's value types with such arguments (nothing else is evaluated)."""
    from stratcore import contract

    if isinstance(node, ast.Name) and node.id.isupper() and hasattr(contract, node.id):
        return getattr(contract, node.id)
    if isinstance(node, ast.Name) and node.id in known:
        return Reference(known[node.id], node.id)
    if isinstance(node, ast.Tuple):
        return tuple(_constant(item, known) for item in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        value_type = contract.VALUE_TYPES.get(node.func.id)
        if value_type is not None and value_type[0] == "stratcore.contract" and not node.args:
            cls = getattr(contract, node.func.id)
            return cls(**{k.arg: _constant(k.value, known) for k in node.keywords if k.arg})
    return ast.literal_eval(node)


@cache
def class_defaults(module: str, class_name: str) -> dict[str, object]:
    """The values a core class gives its annotated class attributes, where they are plain:
    literals, contract constants (e.g. ``PRECISIONS``) and contract value types."""
    cls, known = _class_source(module, class_name)
    result: dict[str, object] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            try:
                result[node.target.id] = _constant(node.value, known)
            except (ValueError, TypeError, SyntaxError):
                continue
    return result


def _bases(module: str, class_name: str) -> list[tuple[str, str]]:
    """The runtime classes ``class_name`` of ``module`` derives from, in order (classes from
    outside the runtime, such as ``ABC``, left out)."""
    cls, known = _class_source(module, class_name)
    found = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and known.get(base.id, "").startswith("stratcore"):
            found.append((known[base.id], base.id))
    return found


@cache
def class_mro(module: str, class_name: str) -> tuple[tuple[str, str], ...]:
    """The method resolution order of a runtime class, among runtime classes."""
    return _merge([(module, class_name)], _bases(module, class_name))


def _merge(head: list[tuple[str, str]], bases: list[tuple[str, str]]) -> tuple[Any, ...]:
    """``head`` followed by the C3 merge of the MROs of ``bases`` and ``bases`` themselves."""
    sequences = [list(class_mro(*base)) for base in bases] + [list(bases)]
    order = list(head)
    while any(sequences):
        for sequence in sequences:
            candidate = sequence[0] if sequence else None
            if candidate is not None and not any(candidate in s[1:] for s in sequences):
                break
        else:
            raise TypeError(f"no consistent method resolution order for {head or bases}")
        order.append(candidate)
        sequences = [s[1:] if s and s[0] == candidate else s for s in sequences]
    return tuple(order)


def inherited_fact(bases: list[tuple[str, str]], attribute: str) -> object:
    """The value a class deriving from the runtime classes ``bases`` (in that order) has for
    the class attribute ``attribute``, as Python would find it."""
    for module, class_name in _merge([], bases):
        defaults = class_defaults(module, class_name)
        if attribute in defaults:
            return defaults[attribute]
    raise KeyError(f"no class among {bases} sets {attribute!r}")


def runtime_bases(base: str, wrapper: str) -> list[tuple[str, str]]:
    """The runtime classes a strategy of ``base`` and ``wrapper`` derives from, in order: its
    wrapper's base class (if any), then its base kind's."""
    from stratcore.contract import BASES, WRAPPERS

    wrapped = WRAPPERS[wrapper].base
    return [wrapped, BASES[base]] if wrapped is not None else [BASES[base]]


def processes_per_node(strategy: Strategy) -> int:
    """The processes per node of a strategy's real runs: one where its runtime classes drive
    every device of a node from one process (``one_process_per_node``) or its launcher runs in
    the calling process alone (``in_calling_process``); two (CPU processes over gloo) else.
    The tests of the stratlib and Lightning targets run it so."""
    from stratcore.contract import LAUNCHERS

    alone = inherited_fact(
        runtime_bases(strategy.base, strategy.wrapper), "one_process_per_node"
    ) or inherited_fact([LAUNCHERS[strategy.launcher]], "in_calling_process")
    return 1 if alone else 2


#: Option types of the plain annotations of the runtime's option attributes.
_ANNOTATION_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str", "Any": "any"}


def _split_union(annotation: str) -> list[str]:
    """The members of ``A | B[C | D] | None``, brackets respected."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += char in "[("
        depth -= char in "])"
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def option_types(annotation: str) -> tuple[str, ...] | None:
    """The option types (``contract.OPTION_TYPES``) an annotation of the runtime allows, None
    besides; None where a member has no option type (a ``Literal``, a class)."""
    members = [m for m in _split_union(annotation) if m != "None"]
    if "str" in members and "os.PathLike[str]" in members:
        members = [m for m in members if m != "os.PathLike[str]"]
        members[members.index("str")] = "path"
    types = []
    for member in members:
        if member in _ANNOTATION_TYPES:
            types.append(_ANNOTATION_TYPES[member])
        elif member == "path" or member.startswith(("Mapping[", "Sequence[", "Callable[")):
            types.append({"M": "mapping", "S": "sequence", "C": "any"}.get(member[0], member))
        else:
            return None
    return tuple(types) or None


def runtime_option(
    bases: list[tuple[str, str]], name: str
) -> tuple[tuple[str, ...], object] | None:
    """The option types and default of ``name`` as the runtime class that reads it declares
    it (an annotated attribute with a plain default, found along the MRO of ``bases``); None
    where no class declares it so."""
    for module, class_name in _merge([], bases):
        annotation = class_annotations(module, class_name).get(name)
        if annotation is None or annotation[0].startswith("ClassVar"):
            continue
        defaults = class_defaults(module, class_name)
        types = option_types(annotation[0])
        if types is None or name not in defaults:
            return None
        return types, defaults[name]
    return None
