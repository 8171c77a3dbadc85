"""Load YAML into a tree of nodes that remember where they came from.

Only plain data is accepted: mappings with string keys, sequences, strings, integers, floats,
booleans and null. Tags that construct objects, merge keys, duplicate keys, non-UTF-8 input,
absurd nesting and anchors that expand without bound are refused with a located error.

Scalars follow YAML 1.2's core schema: ``yes``, ``no``, ``on`` and ``off`` are strings and
dates stay strings, so a spec means what it says.

Where PyYAML has libyaml, libyaml reads the events (a tenth of the time pure Python takes) and
the same composer builds the nodes; a file libyaml rejects is read again by pure Python, whose
error messages a user sees.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import Location, SpecError

MAX_DEPTH = 50
MAX_NODES = 20_000
MAX_BYTES = 512 * 1024  # spec files are a few kilobytes; pyyaml reads ~250 kB a second

# What YAML allows in a stream (printable Unicode); everything else is refused up front with a
# location, rather than by pyyaml's reader with a message about stream positions.
_NOT_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")

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


class _LimitExceeded(Exception):
    def __init__(self, mark: yaml.Mark | None, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _Composer(yaml.composer.Composer, _Resolver):
    """PyYAML's composer with limits, over the events of the parser it is mixed with."""

    def __init__(self) -> None:
        yaml.composer.Composer.__init__(self)
        _Resolver.__init__(self)
        self.depth = 0
        self.composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        # pyyaml composes recursively: stop at the limits while the stack is still shallow and
        # the position is known, instead of after a RecursionError or a long parse.
        mark = self.peek_event().start_mark
        self.depth += 1
        self.composed += 1
        if self.depth > MAX_DEPTH:
            raise _LimitExceeded(mark, f"nesting deeper than {MAX_DEPTH} levels")
        if self.composed > MAX_NODES:
            raise _LimitExceeded(mark, f"more than {MAX_NODES} values in one spec file")
        try:
            return yaml.composer.Composer.compose_node(self, parent, index)
        finally:
            self.depth -= 1


class _Loader(_Composer, yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """Pure Python: events from PyYAML's own reader, scanner and parser."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _Composer.__init__(self)


_FastLoader: Callable[[str], _Composer] | None = None
if yaml.__with_libyaml__:
    from yaml import _yaml  # PyYAML's libyaml binding

    class _LibyamlLoader(_Composer, _yaml.CParser):
        """Events from libyaml."""

        def __init__(self, stream: str) -> None:
            _yaml.CParser.__init__(self, stream)
            _Composer.__init__(self)

    _FastLoader = _LibyamlLoader


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


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _decode(data: bytes, file: str) -> str:
    if len(data) > MAX_BYTES:
        raise SpecError.single(
            Location(file), "", f"file is {len(data)} bytes; specs are limited to {MAX_BYTES}"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError.single(
            Location(file, line, column),
            "",
            f"the file is not valid UTF-8 (byte 0x{data[exc.start]:02x}); save it as UTF-8",
        ) from None


def _check_text(text: str, file: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise SpecError.single(
            Location(file), "", f"file is {size} bytes; specs are limited to {MAX_BYTES}"
        )
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        line, column = _position(text, bad.start())
        what = "control character" if ord(bad.group()) < 0xA0 else "character"
        raise SpecError.single(
            Location(file, line, column),
            "",
            f"{what} U+{ord(bad.group()):04X} is not allowed in a spec; YAML files hold "
            "printable text (write it as an escape in a double-quoted string if you must)",
        )


class _Converter:
    def __init__(self, file: str) -> None:
        self.file = file
        self.visited = 0
        self.ancestors: set[int] = set()

    def fail(self, loc: Location, path: str, message: str) -> SpecError:
        return SpecError.single(loc, path, message)

    def convert(self, node: yaml.Node, depth: int, path: str) -> Node:
        loc = _loc(self.file, node.start_mark)
        if id(node) in self.ancestors:
            raise self.fail(
                loc, path, "an alias refers to the value that contains it (a recursive anchor)"
            )
        self.visited += 1
        if self.visited > MAX_NODES:
            raise self.fail(
                loc,
                path,
                f"the document expands to more than {MAX_NODES} values "
                "(anchors and aliases that repeat without bound?)",
            )
        if depth > MAX_DEPTH:
            raise self.fail(loc, path, f"nesting deeper than {MAX_DEPTH} levels")
        if node.tag not in _ALLOWED_TAGS:
            raise self.fail(
                loc,
                path,
                f"YAML tag {node.tag!r} is not allowed; specs hold plain data "
                "(strings, numbers, booleans, null, lists and mappings)",
            )
        if isinstance(node, yaml.ScalarNode):
            return Node(self._scalar(node, loc, path), loc)
        self.ancestors.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, loc, depth, path)
            return Node(
                [
                    self.convert(item, depth + 1, f"{path}[{index}]")
                    for index, item in enumerate(node.value)
                ],
                loc,
            )
        finally:
            self.ancestors.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: Location, depth: int, path: str) -> Node:
        values: dict[str, Node] = {}
        key_locs: dict[str, Location] = {}
        for key_node, value_node in node.value:
            key_loc = _loc(self.file, key_node.start_mark)
            if key_node.tag == _CORE + "merge" or (
                isinstance(key_node, yaml.ScalarNode)
                and key_node.value == "<<"
                and not key_node.style
            ):
                raise self.fail(
                    key_loc, path, "merge keys ('<<') are not supported; use 'extends:' instead"
                )
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _CORE + "str":
                raise self.fail(
                    key_loc, path, f"mapping keys must be plain strings, found {key_node.tag!r}"
                )
            key = self._scalar(key_node, key_loc, path)
            sub = f"{path}.{key}" if path else key
            if key in values:
                raise self.fail(
                    key_loc,
                    sub,
                    f"duplicate key {key!r}; the first is at line {key_locs[key].line}",
                )
            key_locs[key] = key_loc
            values[key] = self.convert(value_node, depth + 1, sub)
        return Node(values, loc, key_locs)

    def _scalar(self, node: yaml.Node, loc: Location, path: str) -> Any:
        text = node.value
        tag = node.tag
        if tag == _CORE + "str":
            bad = _SURROGATE.search(text)
            if bad:
                raise self.fail(
                    loc,
                    path,
                    f"the string holds U+{ord(bad.group()):04X}, half of a surrogate pair, which "
                    "is not a character; write the character itself",
                )
            return text
        if tag == _CORE + "null":
            return None
        if tag == _CORE + "bool":
            return text.lower() == "true"
        if tag == _CORE + "int":
            try:
                return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
            except ValueError:  # more digits than Python converts (sys.int_info)
                raise self.fail(
                    loc, path, f"integer with {len(text)} digits is too large for a spec"
                ) from None
        if tag == _CORE + "float":
            return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
        raise self.fail(loc, path, f"unsupported scalar {tag!r}")  # pragma: no cover


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or exc.context or "invalid YAML"
    if "'\\t'" in problem:
        return "a tab character cannot indent YAML or start a value; use spaces"
    return f"invalid YAML: {problem}"


def load_yaml(data: bytes | str, file: str) -> Node:
    """Parse one YAML document into a located node tree; an empty file is an empty mapping."""
    text = data if isinstance(data, str) else _decode(data, file)
    _check_text(text, file)
    root = _compose(text, file)
    if root is None:
        return Node({}, Location(file, 1, 1))
    return _Converter(file).convert(root, 0, "")


def _compose(text: str, file: str) -> yaml.Node | None:
    try:
        if _FastLoader is not None:
            try:
                return _FastLoader(text).get_single_node()
            except yaml.YAMLError:
                pass  # read again below: pure Python's messages are the ones users see
        loader = _Loader(text)
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    except _LimitExceeded as exc:
        raise SpecError.single(_loc(file, exc.mark), "", exc.message) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SpecError.single(_loc(file, mark), "", _yaml_problem(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError.single(Location(file), "", f"invalid YAML: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth limit stops well before
        raise SpecError.single(
            Location(file), "", f"nesting deeper than {MAX_DEPTH} levels"
        ) from None


def read_spec_bytes(path: Path, display: str) -> bytes:
    """The bytes of a spec file, or a located error saying why they cannot be read. Only a
    regular file is read (a FIFO would block, a device never end), and no more than one byte
    past ``MAX_BYTES`` (``load_yaml`` refuses a larger file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SpecError.single(Location(display), "", "no such file") from None
    except OSError as exc:
        raise SpecError.single(Location(display), "", f"cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SpecError.single(Location(display), "", "is a directory, not a spec file")
        if not stat.S_ISREG(mode):
            raise SpecError.single(Location(display), "", "is not a regular file, not a spec file")
        try:
            return handle.read(MAX_BYTES + 1)
        except OSError as exc:
            raise SpecError.single(Location(display), "", f"cannot read: {exc.strerror}") from None


def load_yaml_file(path: Path, display: str) -> Node:
    return load_yaml(read_spec_bytes(path, display), display)
