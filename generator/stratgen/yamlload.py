"""Load YAML into a tree of nodes that remember where they came from.

Only plain data is accepted: mappings with string keys, sequences, strings, integers, floats,
booleans and null. Tags that construct objects, merge keys, duplicate keys, non-UTF-8 input,
absurd nesting and anchors that expand without bound are refused with a located error.

Scalars follow YAML 1.2's core schema: ``yes``, ``no``, ``on`` and ``off`` are strings and
dates stay strings, so a spec means what it says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import Location, SpecError

MAX_DEPTH = 50
MAX_NODES = 20_000
MAX_BYTES = 2_000_000

_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class _Resolver(yaml.resolver.BaseResolver):
    """YAML 1.2 core-schema resolution of plain scalars."""


_Resolver.add_implicit_resolver(
    _CORE + "bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Resolver.add_implicit_resolver(
    _CORE + "int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Resolver.add_implicit_resolver(
    _CORE + "float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Resolver.add_implicit_resolver(
    _CORE + "null", re.compile(r"^(?:~|null|Null|NULL|)$"), [*"~nN", ""]
)


class _Loader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _Resolver,
):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Resolver.__init__(self)


@dataclass
class Node:
    """A YAML value with its location. Mappings keep the location of every key."""

    value: Any
    loc: Location
    key_locs: dict[str, Location] = field(default_factory=dict)

    @property
    def is_map(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_seq(self) -> bool:
        return isinstance(self.value, list)

    def plain(self) -> Any:
        """The value with every nested node unwrapped into plain Python data."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value


def _loc(file: str, mark: yaml.Mark | None) -> Location:
    if mark is None:
        return Location(file)
    return Location(file, mark.line + 1, mark.column + 1)


def _decode(data: bytes, file: str) -> str:
    if len(data) > MAX_BYTES:
        raise SpecError.single(
            Location(file), "", f"file is {len(data)} bytes; specs are limited to {MAX_BYTES}"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError.single(
            Location(file, line, column),
            "",
            f"the file is not valid UTF-8 (byte 0x{data[exc.start]:02x}); save it as UTF-8",
        ) from None
    bad = re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise SpecError.single(
            Location(file, line, column),
            "",
            f"control character U+{ord(bad.group()):04X} is not allowed in a spec",
        )
    return text


class _Converter:
    def __init__(self, file: str) -> None:
        self.file = file
        self.visited = 0

    def convert(self, node: yaml.Node, depth: int) -> Node:
        loc = _loc(self.file, node.start_mark)
        self.visited += 1
        if self.visited > MAX_NODES:
            raise SpecError.single(
                loc,
                "",
                f"the document expands to more than {MAX_NODES} values "
                "(anchors and aliases that repeat without bound?)",
            )
        if depth > MAX_DEPTH:
            raise SpecError.single(loc, "", f"nesting deeper than {MAX_DEPTH} levels")
        if node.tag not in _ALLOWED_TAGS:
            raise SpecError.single(
                loc,
                "",
                f"YAML tag {node.tag!r} is not allowed; specs hold plain data "
                "(strings, numbers, booleans, null, lists and mappings)",
            )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc, depth)
        if isinstance(node, yaml.SequenceNode):
            return Node([self.convert(item, depth + 1) for item in node.value], loc)
        return Node(self._scalar(node, loc), loc)

    def _mapping(self, node: yaml.MappingNode, loc: Location, depth: int) -> Node:
        values: dict[str, Node] = {}
        key_locs: dict[str, Location] = {}
        for key_node, value_node in node.value:
            key_loc = _loc(self.file, key_node.start_mark)
            if key_node.tag == _CORE + "merge" or (
                isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" and not key_node.style
            ):
                raise SpecError.single(
                    key_loc, "", "merge keys ('<<') are not supported; use 'extends:' instead"
                )
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _CORE + "str":
                raise SpecError.single(
                    key_loc, "", f"mapping keys must be plain strings, found {key_node.tag!r}"
                )
            key = key_node.value
            if key in values:
                raise SpecError.single(
                    key_loc,
                    key,
                    f"duplicate key {key!r}; the first is at line {key_locs[key].line}",
                )
            key_locs[key] = key_loc
            values[key] = self.convert(value_node, depth + 1)
        return Node(values, loc, key_locs)

    def _scalar(self, node: yaml.Node, loc: Location) -> Any:
        text = node.value
        tag = node.tag
        if tag == _CORE + "str":
            return text
        if tag == _CORE + "null":
            return None
        if tag == _CORE + "bool":
            return text.lower() == "true"
        if tag == _CORE + "int":
            return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
        if tag == _CORE + "float":
            return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
        raise SpecError.single(loc, "", f"unsupported scalar {tag!r}")  # pragma: no cover


def load_yaml(data: bytes | str, file: str) -> Node:
    """Parse one YAML document into a located node tree; an empty file is an empty mapping."""
    text = data if isinstance(data, str) else _decode(data, file)
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError.single(_loc(file, mark), "", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError.single(Location(file), "", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise SpecError.single(
            Location(file), "", f"nesting deeper than {MAX_DEPTH} levels"
        ) from None
    finally:
        loader.dispose()
    if root is None:
        return Node({}, Location(file, 1, 1))
    return _Converter(file).convert(root, 0)


def load_yaml_file(path: Path, display: str) -> Node:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError.single(Location(display), "", "no such file") from None
    except IsADirectoryError:
        raise SpecError.single(Location(display), "", "is a directory, not a spec file") from None
    except OSError as exc:
        raise SpecError.single(Location(display), "", f"cannot read: {exc.strerror}") from None
    return load_yaml(data, display)
