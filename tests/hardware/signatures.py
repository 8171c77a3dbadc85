"""How a function is called, read from its ``def`` (``apisource``) or from a live object
(``inspect``), and which calls one signature accepts that another would refuse or read
otherwise (``differences``)."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from .apisource import UNKNOWN, Module, Reference

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
VARIADIC = (P.VAR_POSITIONAL, P.VAR_KEYWORD)


@dataclass(frozen=True)
class Default:
    text: str  # as written in the source, or the repr of a live value
    value: Any = UNKNOWN

    def same_as(self, other: Default) -> bool:
        if self.text == other.text:
            return True
        mine, theirs = self.value, other.value
        if (
            mine is UNKNOWN
            or theirs is UNKNOWN
            or isinstance(mine, bool) != isinstance(theirs, bool)
        ):
            return False
        try:
            return bool(mine == theirs)
        except Exception:  # noqa: BLE001 - values that cannot be compared differ
            return False


@dataclass(frozen=True)
class Param:
    name: str
    kind: Any  # inspect.Parameter.kind
    default: Default | None = None  # None: required

    def __str__(self) -> str:
        prefix = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}.get(self.kind, "")
        return prefix + self.name + (f"={self.default.text}" if self.default else "")


@dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.params)) + ")"

    def positional(self) -> list[Param]:
        return [p for p in self.params if p.kind in POSITIONAL]

    def takes(self, kind: Any) -> bool:
        return any(p.kind == kind for p in self.params)

    def by_name(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name and p.kind not in VARIADIC), None)


def signature(ref: Reference) -> Signature | None:
    """How a function, method or class (its ``__init__``) is called; None where it cannot be
    read (a callable made at run time, a builtin without a signature)."""
    if ref.kind == "class":
        init = ref.find("__init__")
        return signature(init) if init is not None else None
    if isinstance(ref.node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        assert ref.scope is not None
        params = _ast_params(ref.scope, ref.node.args)
    elif ref.live is not UNKNOWN and callable(ref.live):
        try:
            live = inspect.signature(ref.live)
        except (TypeError, ValueError):
            return None
        params = [
            Param(
                p.name,
                p.kind,
                None if p.default is P.empty else Default(repr(p.default), p.default),
            )
            for p in live.parameters.values()
        ]
    else:
        return None
    if ref.bound and params and params[0].kind in POSITIONAL:
        params = params[1:]
    return Signature(tuple(params))


def _ast_params(scope: Module, args: ast.arguments) -> list[Param]:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    params = [
        Param(
            arg.arg,
            P.POSITIONAL_ONLY if index < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD,
            _default(scope, default),
        )
        for index, (arg, default) in enumerate(zip(positional, defaults, strict=True))
    ]
    if args.vararg:
        params.append(Param(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(Param(arg.arg, P.KEYWORD_ONLY, _default(scope, kw_default)))
    if args.kwarg:
        params.append(Param(args.kwarg.arg, P.VAR_KEYWORD))
    return params


def _default(scope: Module, expr: ast.expr | None) -> Default | None:
    if expr is None:
        return None
    value = UNKNOWN
    try:
        value = ast.literal_eval(expr)
    except ValueError:
        if isinstance(expr, ast.Name | ast.Attribute):
            resolved = scope.resolve(expr)
            value = resolved.value if resolved is not None else UNKNOWN
    return Default(ast.unparse(expr), value)


def differences(standin: Signature, real: Signature) -> list[str]:
    """What the stand-in accepts that the real function refuses or reads otherwise: none when
    every call the stand-in accepts means the same to the real one. The stand-in may refuse
    more: leave out optional parameters, or take keyword-only what the real one also takes by
    position."""
    found = []
    mine, theirs = standin.positional(), real.positional()
    for param in standin.params:
        if param.kind in VARIADIC:
            if not real.takes(param.kind):
                found.append(f"takes {param}, the real one does not")
            continue
        other = _counterpart(real, standin, param)
        if other is None:
            # The real one's *args and **kwargs take what it has no parameter for.
            by_position = param.kind != P.KEYWORD_ONLY and not real.takes(P.VAR_POSITIONAL)
            by_keyword = param.kind != P.POSITIONAL_ONLY and not real.takes(P.VAR_KEYWORD)
            if param.kind == P.POSITIONAL_ONLY and by_position:
                found.append(f"takes {len(mine)} positional arguments, the real one {len(theirs)}")
            elif by_position or by_keyword:
                found.append(f"takes {param.name!r}, which the real one does not")
            continue
        if param.kind == P.POSITIONAL_OR_KEYWORD and other.kind == P.KEYWORD_ONLY:
            found.append(
                f"{param.name!r} may be passed by position here, only by keyword to the real one"
            )
        elif param.kind == P.POSITIONAL_OR_KEYWORD and mine.index(param) != theirs.index(other):
            found.append(
                f"{param.name!r} is positional argument {mine.index(param) + 1} here, "
                f"{theirs.index(other) + 1} in the real one"
            )
        elif param.kind != P.POSITIONAL_ONLY and other.kind == P.POSITIONAL_ONLY:
            found.append(f"{param.name!r} may be passed by keyword here, not to the real one")
        if param.default is not None:
            found += _default_differences(param, other)
    required = [p for p in real.params if p.kind not in VARIADIC and p.default is None]
    for other in required:
        if _counterpart(standin, real, other) is None:
            found.append(f"the real one requires {other.name!r}, which is not taken here")
    return found


def _default_differences(param: Param, other: Param) -> list[str]:
    """How a default of the stand-in's differs from the real one's."""
    assert param.default is not None
    if other.default is None:
        return [f"{param.name!r} defaults to {param.default.text} here; the real one requires it"]
    if not param.default.same_as(other.default):
        theirs = other.default.text
        return [
            f"{param.name!r} defaults to {param.default.text} here, to {theirs} in the real one"
        ]
    return []


def _counterpart(signature: Signature, of: Signature, param: Param) -> Param | None:
    """The parameter of ``signature`` that receives what ``of`` passes as ``param``."""
    if param.kind == P.POSITIONAL_ONLY:
        index = of.positional().index(param)
        positional = signature.positional()
        return positional[index] if index < len(positional) else None
    return signature.by_name(param.name)
