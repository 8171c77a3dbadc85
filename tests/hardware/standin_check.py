"""The check that holds the stand-ins to the APIs they stand in for (``test_standin_apis``).

A stand-in more lenient than the real package hides the bugs users hit first: a call that the
stand-in accepts and the real package refuses passes every test here and fails on the
hardware. So every function, class and method a stand-in provides that the runtime or the
specs use must exist in the real package with a signature that accepts no call the real one
refuses (``signatures.differences``): the same parameter names at the same positions,
keyword-only or variadic only where the real one is, the same defaults, every parameter the
real one requires; a stand-in parameter the real one lacks is a failure. A failure names the
stand-in's file and line and the real one's.

The real packages are the vendors' sources from PyPI (``vendor_sources``: horovod, bagua,
torch_xla, torch-npu; read, never imported), and for the parts of torch's device builds
(``standins/standin_torch.py``, and the probes ``standins/sitecustomize.py`` answers for) the
torch installed here, read with ``inspect``.

What the runtime and the specs use is read from their code, not listed by hand:
- the import paths of the built-in specs (``is_available: torch_npu.npu:is_available``): every
  field of the generator's catalog typed ``ImportPath``. Each must exist in the real package,
  whether a stand-in provides it or not;
- every attribute name that the runtime (``runtime/stratcore``) and the specs' hooks modules
  access, and every identifier-like string they hold (``getattr(hvd, "Average")``). A name
  counts wherever it appears: a stand-in's method is checked when any runtime code calls a
  method of that name.
Classes of a stand-in are always checked, with their ``__init__`` and their bases from outside
the package: they exist only to be the real ones. Private names (``_name``) are checked where
the real module, or a module it imports from, has the name; else they are the stand-in's own.

Not checked, by their nature: values computed at run time (Horovod's reduce ops come from its
C library: that the names exist is checked, not what they hold), and the collective backends
``standin_torch`` registers under names it makes at run time. Stand-ins of packages that cannot
be downloaded (habana_frameworks, poptorch, torch_mlu, torch_musa) name what they were written
from instead (``test_standin_apis.test_every_standin_names_its_source``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stratgen.project import Project, load_config
from stratgen.resolve.resolver import resolve
from stratgen.spec.model import ImportPath

from .apisource import UNKNOWN, Module, Reference, SourceTree, import_live, live_member
from .signatures import differences, signature
from .support import REPO, STANDINS

# --- what the runtime and the specs use -----------------------------------------------------


@functools.cache
def _catalog() -> typing.Any:
    return resolve(Project(load_config(REPO)).sources())


@functools.cache
def spec_import_paths() -> dict[str, list[str]]:
    """'module:attribute' -> the spec fields naming it ('accelerator npu: is_available')."""
    found: dict[str, list[str]] = {}
    catalog = _catalog()
    entries = {
        "accelerator": catalog.accelerators,
        "backend": catalog.backends,
        "precision plugin": catalog.precision_plugins,
        "strategy": catalog.strategies,
    }
    for kind, table in entries.items():
        for name, entry in table.items():
            for field, path in _import_paths(getattr(entry, "spec", entry)):
                found.setdefault(path, []).append(f"{kind} {name}: {field}")
    return found


def _import_paths(spec: typing.Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(field, value) of every field of a spec dataclass, nested ones too, typed ImportPath."""
    hints = typing.get_type_hints(type(spec), include_extras=True)
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if _mentions(hints.get(field.name), ImportPath):
            values = value.values() if isinstance(value, dict) else [value]
            yield from ((prefix + field.name, v) for v in values if isinstance(v, str))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _import_paths(value, f"{prefix}{field.name}.")


def _mentions(hint: typing.Any, wanted: typing.Any) -> bool:
    return hint == wanted or any(_mentions(arg, wanted) for arg in typing.get_args(hint))


@functools.cache
def runtime_names() -> frozenset[str]:
    """Attribute names and identifier-like strings of the runtime and the specs' hooks."""
    files = sorted((REPO / "runtime" / "stratcore").rglob("*.py"))
    for strategy in _catalog().strategies.values():
        if strategy.hooks and strategy.hooks.endswith(".py"):
            files.append(Path(strategy.source.hooks_dir, strategy.hooks))
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and str(node.value).isidentifier():
                names.add(str(node.value))
    return frozenset(names)


def used(module: str, name: str) -> bool:
    return name in runtime_names() or f"{module}:{name}" in spec_import_paths()


# --- the comparison -------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    name: str
    problem: str
    standin: object
    real: object

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.problem}\n    stand-in: {self.standin}\n    real:     {self.real}"
        )


class Check:
    """Compares stand-in modules with the real modules of the same names (``real_module``);
    ``used(module or class, name)`` says which names the runtime or the specs use."""

    def __init__(
        self,
        real_module: Callable[[str], Reference | None],
        used: Callable[[str, str], bool] = used,
        values: bool = True,
    ) -> None:
        self.real_module = real_module
        self.used = used
        self.values = values  # compare literal values (not for torch's build markers)
        self.findings: list[Finding] = []

    def report(self, name: str, problem: str, standin: object, real: object) -> None:
        self.findings.append(Finding(name, problem, standin, real))

    def module(self, module: Module) -> None:
        real = self.real_module(module.name)
        if real is None:
            self.report(module.name, "the real package has no such module", module.path, "-")
            return
        for name in module.definitions():
            mine, theirs = module.get(name), real.member(name)
            if theirs is None and name.startswith("_") and real.scope is not None:
                theirs = real.scope.get_nearby(name)  # a private class kept elsewhere
            if mine is None or (name.startswith("_") and theirs is None):
                continue  # the stand-in's own helper
            if mine.kind == "class" or self.used(module.name, name):
                self.compare(f"{module.name}.{name}", mine, theirs, real.where)

    def compare(
        self,
        name: str,
        mine: Reference,
        real: Reference | None,
        context: object,
        where: object = None,
    ) -> None:
        """``where``: the stand-in's place to name, if not ``mine``'s own (an inherited method)."""
        where = where or mine.where
        if real is None:
            self.report(name, "the real package has none", where, context)
        elif mine.kind != real.kind:
            self.report(
                name, f"a {real.kind} in the real package, a {mine.kind} here", where, real.where
            )
        elif mine.kind == "function":
            ours, theirs = signature(mine), signature(real)
            if ours is None or theirs is None:
                unread = mine if ours is None else real
                self.report(name, f"cannot read the signature at {unread.where}", where, real.where)
                return
            found = differences(ours, theirs)
            if found:
                self.report(name, "; ".join(found), f"{where} {ours}", f"{real.where} {theirs}")
        elif mine.kind == "class":
            self.class_members(name, mine, real)
        elif mine.kind == "value" and self.values:
            ours, theirs = mine.value, real.value
            if UNKNOWN not in (ours, theirs) and (type(ours), ours) != (type(theirs), theirs):
                self.report(
                    name, f"{ours!r} here, {theirs!r} in the real package", where, real.where
                )

    def class_members(self, name: str, mine: Reference, real: Reference) -> None:
        """The class's bases from outside the package, its methods and attributes that the
        runtime uses, and its __init__."""
        ours_outside = mine.live_bases()
        missing = [b for b in real.live_bases() if not any(issubclass(c, b) for c in ours_outside)]
        for base in missing:
            qualified = f"{base.__module__}.{base.__qualname__}"
            self.report(
                name,
                f"derives from {qualified} in the real package, not here",
                mine.where,
                real.where,
            )
        names = {n for n in mine.own_names() | real.own_names() if self.used(name, n)}
        for member in sorted(names | {"__init__"}):
            # Where the stand-in lacks a base, its objects are compared as if they had it (as
            # a mixin's do, on the class it is mixed into): their methods come from it.
            ours, theirs = mine.find(member) or _find_live(missing, member), real.find(member)
            if ours is None:
                continue
            if theirs is None and (member.startswith("_") or member in real.instance_attributes()):
                continue  # the stand-in's own helper, or an attribute the real one sets
            if theirs is not None and ours.kind == theirs.kind == "class":
                continue  # a class held by the class: checked where it is defined
            inherited = ours.where.path != mine.where.path
            where = f"{mine.where} ({member} from {ours.where})" if inherited else None
            self.compare(f"{name}.{member}", ours, theirs, real.where, where)
        for attribute in sorted(mine.instance_attributes()):
            if attribute.startswith("_") or not self.used(name, attribute):
                continue
            if real.find(attribute) is not None or attribute in real.instance_attributes():
                continue
            if real.find("__getattr__") is not None:
                continue  # the real class makes attributes up as they are asked for
            if any(hasattr(base, attribute) for base in real.live_bases()):
                continue
            self.report(
                f"{name}.{attribute}",
                "set on the stand-in's objects; the real class has no such attribute",
                mine.where,
                real.where,
            )


def _find_live(classes: list[type], name: str) -> Reference | None:
    for cls in classes:
        owner = next((c for c in cls.__mro__ if name in vars(c) and c is not object), None)
        if owner is not None:
            return live_member(owner, name, bind=True)
    return None


# --- where the stand-ins and the real packages are ----------------------------------------------

STANDIN_TREE = SourceTree(STANDINS)


def real_ref(path: str, tree: SourceTree | None) -> Reference | None:
    """What 'module:attribute' names in ``tree``, or in what is installed here (None)."""
    module, _, attribute = path.partition(":")
    found = tree.module(module) if tree is not None else None
    base = found.ref if found is not None else (import_live(module) if tree is None else None)
    return base.member(attribute) if base is not None else None


def hook_standins() -> list[tuple[str, str, Reference]]:
    """(spec field, name, function) for each probe ``sitecustomize`` answers in place of the
    accelerator's own (``cls.is_available_hook = "sitecustomize:standin_present"``)."""
    module = STANDIN_TREE.module("sitecustomize")
    assert module is not None
    found = []
    for node in ast.walk(module.syntax):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            target, value = node.targets[0], str(node.value.value)
            if isinstance(target, ast.Attribute) and value.startswith("sitecustomize:"):
                name = value.partition(":")[2]
                function = module.get(name)
                assert function is not None, value
                found.append((target.attr.removesuffix("_hook"), name, function))
    return found


def torch_parts() -> list[tuple[str, str, Reference]]:
    """(torch module, attribute, the stand-in's) for what each part of ``standin_torch.PARTS``
    sets on torch's module (``module.device_count = device_count``). Parts made by a call
    (``_backend("xccl")``) set names made at run time and are not read."""
    module = STANDIN_TREE.module("standin_torch")
    assert module is not None
    parts = module.definitions()["PARTS"]
    found = []
    for entry in parts.values:
        torch_module, change = entry.elts
        if not isinstance(change, ast.Name):
            continue
        function = module.definitions()[change.id]
        inner = {n.name: n for n in function.body if isinstance(n, ast.FunctionDef)}
        for node in function.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
                value = (
                    inner.get(node.value.id, node.value)
                    if isinstance(node.value, ast.Name)
                    else node.value
                )
                kind = "function" if isinstance(value, ast.FunctionDef | ast.Lambda) else "value"
                ref = Reference(kind, module.where(node), value, module)
                found.append((torch_module.value, node.targets[0].attr, ref))
    return found


def check_package(
    package: str | None, tree: SourceTree | None, standins: SourceTree = STANDIN_TREE
) -> list[Finding]:
    """The findings for one vendor package, whose source is ``tree``, or for the stand-ins of
    torch's device builds (``package`` None: against the torch installed here)."""
    top = package or "torch"

    def real_module(name: str) -> Reference | None:
        found = tree.module(name) if tree is not None else None
        return found.ref if found is not None else (import_live(name) if tree is None else None)

    check = Check(real_module, values=package is not None)
    if package is not None:
        for module in standins.modules(package):
            check.module(module)
    else:
        for torch_module, attribute, ref in torch_parts():
            if used(torch_module, attribute):
                real = real_module(torch_module)
                theirs = real.member(attribute) if real is not None else None
                check.compare(f"{torch_module}.{attribute}", ref, theirs, torch_module)
    catalog = _catalog()
    for field, function_name, function in hook_standins():
        for accelerator in catalog.accelerators.values():
            path = getattr(accelerator.spec, field, None)
            if path and _top(path) == top:
                name = f"sitecustomize:{function_name} for {accelerator.name}'s {field} {path}"
                check.compare(name, function, real_ref(path, tree), path)
    for path, fields in sorted(spec_import_paths().items()):
        if tree is not None and _top(path) == top and real_ref(path, tree) is None:
            named = "; ".join(fields)
            check.report(
                path, f"named by the specs ({named}); the real package has none", "-", tree.root
            )
    return check.findings


def _top(path: str) -> str:
    """The top-level package of 'package.module:attribute'."""
    return path.partition(":")[0].partition(".")[0]


def failure_report(findings: list[Finding], against: str) -> str:
    lines = [f"{len(findings)} difference(s) between the stand-in and {against}:"]
    return "\n".join(lines + [str(finding) for finding in findings])
