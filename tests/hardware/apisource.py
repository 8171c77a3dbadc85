"""Python APIs read from their source without importing it, and compared.

``SourceTree`` is a folder of packages: a stand-in's, or a vendor's as ``vendor_sources``
unpacked it. ``Module.get`` finds what a module provides under a name and follows it to its
definition: through ``from x import y``, ``import x.y as z``, star imports (which take a
module's ``__all__``, or its public names), names assigned from other names, and attributes of
module-level instances (Horovod's ``rank = _basics.rank`` is ``HorovodBasics.rank``). Names
from outside the tree (torch, the standard library) are imported and read with ``inspect``;
nothing of the tree is ever imported. Only the files a lookup needs are parsed.

``signatures`` reads and compares how the functions found here are called.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


#: A value that cannot be known without running the code.
UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class Where:
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def where_live(obj: Any) -> Where:
    """Where a live function or class is defined (without ``inspect.getsourcelines``, which
    parses a class's whole module)."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(obj, "__code__", None)
    if code is not None:
        return Where(code.co_filename, code.co_firstlineno)
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    if path is None:
        return Where(f"<{getattr(obj, '__qualname__', type(obj).__qualname__)}>", 0)
    if inspect.isclass(obj):
        pattern = re.compile(rf"^\s*class {re.escape(obj.__name__)}\b", re.M)
        match = pattern.search(Path(path).read_text(encoding="utf-8"))
        if match is not None:
            return Where(path, match.string.count("\n", 0, match.start()) + 1)
    return Where(path, 1)


@dataclass(frozen=True, eq=False)
class Reference:
    """What a name stands for: a module, class, function, property or other value."""

    kind: str  # 'module', 'class', 'function', 'property' or 'value'
    where: Where
    node: ast.AST | None = None  # its def, class or expression in ``scope``
    scope: Module | None = None  # the module whose source holds it (a module: itself)
    live: Any = UNKNOWN  # the object itself, for what comes from outside the tree
    bound: bool = False  # a method as its instances see it: without its first parameter
    instance_of: Reference | None = None  # a value made by calling this class

    @property
    def value(self) -> Any:
        """A value's Python value where its source is a literal (or it is live)."""
        if self.live is not UNKNOWN or not isinstance(self.node, ast.expr):
            return self.live
        try:
            return ast.literal_eval(self.node)
        except ValueError:
            return UNKNOWN

    def member(self, name: str) -> Reference | None:
        """The attribute ``name`` of this module, class, instance or live object."""
        if self.kind == "module" and self.scope is not None:
            return self.scope.get(name)
        if self.kind == "class":
            return self.find(name, bind=False)
        if self.instance_of is not None:
            found = self.instance_of.find(name)
            if found is None and name in self.instance_of.instance_attributes():
                found = Reference("value", self.where)
            return found
        if self.live is not UNKNOWN and hasattr(self.live, name):
            return live_ref(getattr(self.live, name))
        return None

    # -- classes ---------------------------------------------------------------------------

    def bases(self) -> list[Reference]:
        if self.live is not UNKNOWN:
            return [live_ref(base) for base in self.live.__bases__]
        assert isinstance(self.node, ast.ClassDef) and self.scope is not None
        written = [b.value if isinstance(b, ast.Subscript) else b for b in self.node.bases]
        resolved = [self.scope.resolve(base) for base in written]  # dict[str, int]: dict
        return [base for base in resolved if base is not None and base.kind == "class"]

    def mro(self) -> list[Reference]:
        """This class and its bases, depth first (enough for the single inheritance here)."""
        order = [self]
        for base in self.bases():
            order += [cls for cls in base.mro() if all(cls.where != o.where for o in order)]
        return order

    def find(self, name: str, bind: bool = True) -> Reference | None:
        """The class attribute ``name`` along the MRO; with ``bind``, methods as an instance
        sees them (without self)."""
        for cls in self.mro():
            found = cls._own(name, bind)
            if found is not None:
                return found
        return None

    def own_names(self) -> set[str]:
        if self.live is not UNKNOWN:
            return set(vars(self.live))
        return set(_class_body(self.node))

    def instance_attributes(self) -> set[str]:
        """What the methods of this class and its bases in the tree assign to ``self.<name>``."""
        names: set[str] = set()
        for cls in self.mro():
            if isinstance(cls.node, ast.ClassDef):
                for node in ast.walk(cls.node):
                    targets = node.targets if isinstance(node, ast.Assign) else []
                    if isinstance(node, ast.AnnAssign | ast.AugAssign):
                        targets = [node.target]
                    names |= {
                        t.attr
                        for t in targets
                        if isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    }
        return names

    def live_bases(self) -> list[type]:
        """The classes from outside the tree this class derives from (object aside)."""
        return [c.live for c in self.mro() if c.live is not UNKNOWN and c.live is not object]

    def _own(self, name: str, bind: bool) -> Reference | None:
        if self.live is not UNKNOWN:
            if name not in vars(self.live):
                return None
            return live_member(self.live, name, bind)
        node = _class_body(self.node).get(name)
        if node is None:
            return None
        assert self.scope is not None
        where = self.scope.where(node)
        if isinstance(node, ast.ClassDef):
            return Reference("class", where, node, self.scope)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = {ast.unparse(d).rpartition(".")[2] for d in node.decorator_list}
            if decorators & {"property", "cached_property", "setter", "getter"}:
                return Reference("property", where, node, self.scope)
            bound = (bind and "staticmethod" not in decorators) or "classmethod" in decorators
            return Reference("function", where, node, self.scope, bound=bound)
        resolved = self.scope.resolve(node)
        return resolved if resolved is not None else Reference("value", where, node, self.scope)


def _class_body(node: ast.AST | None) -> dict[str, ast.AST]:
    """Name -> what the class body binds to it (a def, a class, or an assigned expression)."""
    assert isinstance(node, ast.ClassDef)
    body: dict[str, ast.AST] = {}
    for statement in node.body:
        for name, bound in _binds(statement):
            if not isinstance(bound, _Imported):
                body[name] = bound
    return body


def live_ref(obj: Any) -> Reference:
    if inspect.ismodule(obj):
        return Reference("module", where_live(obj), live=obj)
    if inspect.isclass(obj):
        return Reference("class", where_live(obj), live=obj)
    if callable(obj):
        return Reference("function", where_live(obj), live=obj)
    return Reference("value", Where(repr(obj), 0), live=obj)


def live_member(cls: type, name: str, bind: bool) -> Reference:
    raw = inspect.getattr_static(cls, name)
    where = where_live(getattr(cls, name))
    if isinstance(raw, property | staticmethod | classmethod):
        kind = "property" if isinstance(raw, property) else "function"
        function = raw.fget if isinstance(raw, property) else raw.__func__
        return Reference(kind, where, live=function, bound=isinstance(raw, classmethod))
    if inspect.isclass(raw):
        return live_ref(raw)
    if callable(raw):
        return Reference("function", where, live=raw, bound=bind)
    return Reference("value", where, live=raw)


def import_live(dotted: str) -> Reference | None:
    """``package.module.attribute`` from outside the tree, imported."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return live_ref(obj)
    return None


# --- modules --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Imported:
    """A name bound by an import: ``module`` itself, or its attribute ``name``."""

    module: str
    name: str | None
    node: ast.AST


def _executed(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body``, with those of ``if`` and ``try`` blocks (not of ``except``
    handlers, which run only where the block failed)."""
    flat: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, ast.If):
            flat += _executed(statement.body) + _executed(statement.orelse)
        elif isinstance(statement, ast.Try):
            flat += _executed(statement.body + statement.orelse + statement.finalbody)
        else:
            flat.append(statement)
    return flat


def _binds(statement: ast.stmt, package: str = "") -> list[tuple[str, Any]]:
    """(name, what it is bound to) for each name ``statement`` binds."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(statement.name, statement)]
    if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        bound: list[tuple[str, Any]] = []
        for target in targets:
            if isinstance(target, ast.Name):
                bound.append((target.id, statement.value))
            elif isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple):
                pairs = zip(target.elts, statement.value.elts, strict=False)
                bound += [(t.id, v) for t, v in pairs if isinstance(t, ast.Name)]
        return bound
    if isinstance(statement, ast.Import):
        return [
            (
                (a.asname, _Imported(a.name, None, a))
                if a.asname
                else (a.name.split(".")[0], _Imported(a.name.split(".")[0], None, a))
            )
            for a in statement.names
        ]
    if isinstance(statement, ast.ImportFrom):
        source = _absolute(package, statement.module, statement.level)
        return [(a.asname or a.name, _Imported(source, a.name, a)) for a in statement.names]
    return []


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


class SourceTree:
    """A folder of packages, read as source."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            base = self.root.joinpath(*name.split("."))
            found = None
            if (base / "__init__.py").is_file():
                found = Module(self, name, base / "__init__.py", is_package=True)
            elif base.with_name(base.name + ".py").is_file():
                found = Module(self, name, base.with_name(base.name + ".py"), is_package=False)
            elif base.is_dir():  # a namespace package
                found = Module(self, name, base, is_package=True)
            self._modules[name] = found
        return self._modules[name]

    def holds(self, dotted: str) -> bool:
        """Whether the top-level package of ``dotted`` is in this tree."""
        return self.module(dotted.split(".")[0]) is not None

    def modules(self, package: str) -> list[Module]:
        """``package`` and every module below it."""
        names = []
        for path in sorted((self.root / package).rglob("*.py")):
            parts = path.relative_to(self.root).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return [m for m in map(self.module, names) if m is not None]


class Module:
    def __init__(self, tree: SourceTree, name: str, path: Path, is_package: bool) -> None:
        self.tree, self.name, self.path, self.is_package = tree, name, path, is_package
        self.ref = Reference("module", Where(str(path), 1), scope=self)
        self._looking: set[str] = set()

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @cached_property
    def syntax(self) -> ast.Module:
        if self.path.is_dir():  # a namespace package has no code
            return ast.Module(body=[], type_ignores=[])
        return ast.parse(self.path.read_text(encoding="utf-8"), str(self.path))

    @cached_property
    def _bindings(self) -> tuple[dict[str, Any], list[str]]:
        bindings: dict[str, Any] = {}
        stars = []
        for statement in _executed(self.syntax.body):
            for name, bound in _binds(statement, self.package):
                if name == "*":
                    stars.append(bound.module)
                else:
                    bindings[name] = bound
        return bindings, stars

    def definitions(self) -> dict[str, Any]:
        """What this module itself binds at its top level, imports left out."""
        return {n: b for n, b in self._bindings[0].items() if not isinstance(b, _Imported)}

    def get_nearby(self, name: str) -> Reference | None:
        """``name`` in this module, or else in a module of the tree this one imports from
        (where a package keeps what its public names are made of: Horovod's
        ``_DistributedOptimizer`` beside the ``DistributedOptimizer`` horovod.torch imports)."""
        found = self.get(name)
        sources = {b.module for b in self._bindings[0].values() if isinstance(b, _Imported)}
        for source in sorted(sources | set(self._bindings[1])):
            if found is not None:
                break
            module = self.tree.module(source) if self.tree.holds(source) else None
            found = module.get(name) if module is not None else None
        return found

    def exported(self) -> set[str]:
        """The names a star import takes: ``__all__`` (a literal, extended with ``+=``), or
        every public name."""
        public = {name for name in self._bindings[0] if not name.startswith("_")}
        written: list[Any] = [self._bindings[0].get("__all__")] + [
            s.value
            for s in self.syntax.body
            if isinstance(s, ast.AugAssign) and ast.unparse(s.target) == "__all__"
        ]
        if written[0] is None or isinstance(written[0], _Imported):
            return public
        try:
            return {name for value in written for name in ast.literal_eval(value)}
        except ValueError:  # built at run time: every public name may be in it
            return public

    def where(self, node: Any) -> Where:
        return Where(str(self.path), getattr(node, "lineno", 1))

    def get(self, name: str) -> Reference | None:
        """What ``name`` stands for in this module (None: nothing of that name)."""
        if name in self._looking:  # a cycle of imports between modules of the tree
            return None
        self._looking.add(name)
        try:
            return self._get(name)
        finally:
            self._looking.discard(name)

    def _get(self, name: str) -> Reference | None:
        bindings, stars = self._bindings
        if name in bindings:
            return self._follow(bindings[name])
        for star in stars:
            source = self.tree.module(star)
            if source is not None and name in source.exported():
                found = source.get(name)
                if found is not None:
                    return found
        submodule = self.tree.module(f"{self.name}.{name}") if self.is_package else None
        return submodule.ref if submodule is not None else None

    def _follow(self, bound: Any) -> Reference | None:
        if isinstance(bound, ast.FunctionDef | ast.AsyncFunctionDef):
            return Reference("function", self.where(bound), bound, self)
        if isinstance(bound, ast.ClassDef):
            return Reference("class", self.where(bound), bound, self)
        if isinstance(bound, _Imported):
            dotted = bound.module + (f".{bound.name}" if bound.name else "")
            if not self.tree.holds(bound.module):
                return import_live(dotted)
            source = self.tree.module(bound.module)
            if source is None:
                return None
            return source.get(bound.name) if bound.name else source.ref
        return self.resolve(bound)

    def resolve(self, expr: Any) -> Reference | None:
        """What an expression of this module's top level stands for."""
        if isinstance(expr, ast.Name):
            found = self.get(expr.id)
            if found is None and hasattr(builtins, expr.id):
                return live_ref(getattr(builtins, expr.id))
            return found
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return base.member(expr.attr) if base is not None else None
        if isinstance(expr, ast.Lambda):
            return Reference("function", self.where(expr), expr, self)
        if isinstance(expr, ast.Call):
            callee = self.resolve(expr.func)
            made_by = callee if callee is not None and callee.kind == "class" else None
            return Reference("value", self.where(expr), expr, self, instance_of=made_by)
        return Reference("value", self.where(expr), expr, self)
