"""Turn located YAML nodes into model objects, checking every key against its declared type.

The conversion is driven by the type hints of ``model``: a dataclass is a mapping
whose keys are its fields, ``Literal`` is an enumeration, ``Annotated[str, Pattern]`` a string
that must match, ``tuple[T, ...]`` a list and ``dict[K, V]`` a mapping. All problems in a file
are collected, each with its location and field path.
"""

from __future__ import annotations

import dataclasses
import keyword
import re
import types
import typing
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Union

from stratcore.contract import Pattern
from stratcore.wording import close_names, did_you_mean

from .errors import Location, SpecError, SpecProblem, one_of
from .model import SpecFile

if TYPE_CHECKING:  # nodes are made by yaml_loader: a run whose specs all come from the cache
    from .yaml_loader import Node  # never imports it, nor pyyaml

MAX_STRING = 20_000


class _Invalid(Exception):
    """Raised inside conversion once a problem has been recorded."""


@cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def spec_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a model class that a spec may set (not the bookkeeping ones)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    return f"the string {_short(value)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(tp: Any) -> str:
    """A short human description of a type, for 'expected ...' messages."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        pattern = tp.__metadata__[0]
        return pattern.what if isinstance(pattern, Pattern) else _describe(tp.__origin__)
    if origin is Literal:
        return "one of " + one_of(typing.get_args(tp))
    if origin in (Union, types.UnionType):
        parts = [_describe(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts)
    if origin is tuple:
        return f"a list whose items are each {_describe(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, "a value"
    )


class Converter:
    """Converts one file's nodes, collecting problems instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[SpecProblem] = []

    def fail(self, loc: Location, path: str, message: str) -> _Invalid:
        self.problems.append(SpecProblem(loc, path, message))
        return _Invalid()

    def convert(self, node: Node, tp: Any, path: str) -> Any:
        origin = typing.get_origin(tp)
        if tp is Any:
            return node.plain()
        if origin is typing.Annotated:
            return self._annotated(node, tp, path)
        if origin is Literal:
            return self._literal(node, tp, path)
        if origin in (Union, types.UnionType):
            return self._union(node, tp, path)
        if origin is tuple:
            return self._tuple(node, tp, path)
        if origin is dict:
            return self._dict(node, tp, path)
        if dataclasses.is_dataclass(tp):
            return self.dataclass(node, tp, path)
        return self._scalar(node, tp, path)

    def _scalar(self, node: Node, tp: type, path: str) -> Any:
        value = node.value
        ok = (
            (tp is bool and isinstance(value, bool))
            or (tp is int and isinstance(value, int) and not isinstance(value, bool))
            or (tp is float and isinstance(value, int | float) and not isinstance(value, bool))
            or (tp is str and isinstance(value, str))
        )
        if not ok:
            raise self.fail(node.loc, path, f"expected {_describe(tp)}, found {_kind(value)}")
        if tp is str and len(value) > MAX_STRING:
            raise self.fail(node.loc, path, f"string longer than {MAX_STRING} characters")
        return float(value) if tp is float else value

    def _annotated(self, node: Node, tp: Any, path: str) -> Any:
        value = self.convert(node, tp.__origin__, path)
        for meta in tp.__metadata__:
            if not isinstance(meta, Pattern):
                continue
            if not re.fullmatch(meta.regex, value, flags=re.ASCII):
                raise self.fail(node.loc, path, f"expected {meta.what}, found {_short(value)}")
            if not meta.keyword_ok and (keyword.iskeyword(value) or keyword.issoftkeyword(value)):
                raise self.fail(
                    node.loc, path, f"{value!r} is a Python keyword and cannot be used as a name"
                )
        return value

    def _literal(self, node: Node, tp: Any, path: str) -> Any:
        choices = typing.get_args(tp)
        value = node.value
        if value in choices and type(value) is type(choices[0]):
            return value
        hint = did_you_mean(str(value), [str(c) for c in choices]) if value is not None else ""
        raise self.fail(
            node.loc, path, f"expected one of {one_of(choices)}, found {_kind(value)}{hint}"
        )

    def _union(self, node: Node, tp: Any, path: str) -> Any:
        members = typing.get_args(tp)
        if node.value is None and type(None) in members:
            return None
        candidates = [m for m in members if m is not type(None) and self._fits_shape(node, m)]
        if not candidates:
            raise self.fail(node.loc, path, f"expected {_describe(tp)}, found {_kind(node.value)}")
        # Try each member whose shape fits; report the last member's problems if none work.
        for index, member in enumerate(candidates):
            saved = len(self.problems)
            try:
                return self.convert(node, member, path)
            except _Invalid:
                if index < len(candidates) - 1:
                    del self.problems[saved:]
                else:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _fits_shape(node: Node, tp: Any) -> bool:
        """Whether the node's kind (mapping, list, scalar) can be converted into ``tp``."""
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            return Converter._fits_shape(node, tp.__origin__)
        if tp is Any:
            return True
        if dataclasses.is_dataclass(tp):
            return node.is_map or (hasattr(tp, "__shorthand__") and node.value is not None)
        if origin is dict:
            return node.is_map
        if origin is tuple:
            return not node.is_map and node.value is not None
        return not node.is_map and not node.is_seq

    def _tuple(self, node: Node, tp: Any, path: str) -> tuple[Any, ...]:
        item_type = typing.get_args(tp)[0]
        if (
            not node.is_seq
            and not node.is_map
            and node.value is not None
            and self._fits_shape(node, item_type)
        ):
            node = type(node)([node], node.loc)  # a single value stands for a list of one
        if not node.is_seq:
            raise self.fail(node.loc, path, f"expected {_describe(tp)}, found {_kind(node.value)}")
        items = []
        failed = False
        for index, item in enumerate(node.value):
            try:
                items.append(self.convert(item, item_type, f"{path}[{index}]"))
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return tuple(items)

    def _dict(self, node: Node, tp: Any, path: str) -> dict[Any, Any]:
        if not node.is_map:
            raise self.fail(node.loc, path, f"expected a mapping, found {_kind(node.value)}")
        key_type, value_type = typing.get_args(tp)
        result = {}
        failed = False
        for key, value in node.value.items():
            sub = f"{path}.{key}" if path else key
            try:
                converted_key = self.convert(type(node)(key, node.key_locs[key]), key_type, sub)
                result[converted_key] = self.convert(value, value_type, sub)
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return result

    def dataclass(self, node: Node, cls: Any, path: str) -> Any:
        shorthand = getattr(cls, "__shorthand__", None)
        if shorthand is not None and not node.is_map:
            # A bare value (or list) stands for the class's main key: 'world_size: WORLD_SIZE'.
            value = self.convert(node, type_hints(cls)[shorthand], f"{path}.{shorthand}")
            return cls(**{shorthand: value}, loc=node.loc, locs={shorthand: node.loc})
        if not node.is_map:
            raise self.fail(node.loc, path, f"expected a mapping, found {_kind(node.value)}")
        fields = {f.name: f for f in spec_fields(cls)}
        hints = type_hints(cls)
        kwargs: dict[str, Any] = {}
        failed = False
        misspelt: set[str] = set()  # required keys an unknown key is a near miss of
        for key, value in node.value.items():
            sub = f"{path}.{key}" if path else key
            if key not in fields:
                misspelt.update(close_names(key, fields)[:1])
                self.fail(
                    node.key_locs[key],
                    sub,
                    f"unknown key {key!r}{did_you_mean(key, fields)}; "
                    f"allowed keys: {', '.join(fields)}",
                )
                failed = True
                continue
            try:
                kwargs[key] = self.convert(value, hints[key], sub)
            except _Invalid:
                failed = True
        for name, f in fields.items():
            if (
                name not in node.value
                and name not in misspelt
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            ):
                where = f"{path}.{name}" if path else name
                self.fail(node.loc, where, f"missing required key {name!r}")
                failed = True
        if failed:
            raise _Invalid()
        locs: dict[str, Location] = {}
        for key, value in node.value.items():
            locs[key] = value.loc
            if not dataclasses.is_dataclass(_inner(hints[key])):
                _nested_locs(key, value, locs)
        return cls(**kwargs, loc=node.loc, locs=locs)


def _inner(tp: Any) -> Any:
    """The dataclass a field holds (directly, optionally or in a list), else ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _inner(tp.__origin__)
    if origin in (Union, types.UnionType):
        members = [_inner(m) for m in typing.get_args(tp) if m is not type(None)]
        return next((m for m in members if dataclasses.is_dataclass(m)), tp)
    if origin is tuple:
        return _inner(typing.get_args(tp)[0])
    if origin is dict:
        return _inner(typing.get_args(tp)[1])
    return tp


def _nested_locs(prefix: str, node: Node, locs: dict[str, Location]) -> None:
    """Locations inside plain-data fields: 'aliases.fast.option' (the key), 'cluster[1]'."""
    if node.is_map:
        for key, value in node.value.items():
            locs[f"{prefix}.{key}"] = node.key_locs[key]
            _nested_locs(f"{prefix}.{key}", value, locs)
    elif node.is_seq:
        for index, item in enumerate(node.value):
            locs[f"{prefix}[{index}]"] = item.loc
            _nested_locs(f"{prefix}[{index}]", item, locs)


def parse_spec_file(node: Node) -> SpecFile:
    """Convert a loaded spec file, raising SpecError with every problem found."""
    converter = Converter()
    try:
        result: SpecFile = converter.dataclass(node, SpecFile, "")
    except _Invalid:
        raise SpecError(converter.problems) from None
    return result
