"""What a spec says of its own facts: the comments beside them.

A spec names, next to each fact, where it comes from (``# torch_npu/npu/utils.py:
is_bf16_supported``): after the key on its line, or in comment lines directly above it. YAML
parsers drop comments, so this module reads them from the spec's text, at the lines where the
loader (``stratgen.spec.yaml_loader``) found each key, and lays the spec's values out as rows of
facts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...spec.yaml_loader import Node, load_yaml

if TYPE_CHECKING:
    from ...resolve.catalog import Source

#: A first line that only tells editors where the schema is, not part of the spec's notes.
EDITOR_HINT = "# yaml-language-server:"


def trailing_comment(line: str) -> str:
    """The comment at the end of a YAML line ('' if none): a '#' at the start of the line or
    after a space, outside quotes."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"" and (index == 0 or line[index - 1] in " :[{,-"):
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[index + 1 :].strip()
    return ""


def _paragraphs(comments: list[str]) -> str:
    """Comment lines as text: lines joined, an empty comment line starting a new paragraph."""
    paragraphs: list[list[str]] = [[]]
    for comment in comments:
        if comment:
            paragraphs[-1].append(comment)
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join(" ".join(p) for p in paragraphs if p)


@dataclass(frozen=True)
class SpecText:
    """A spec file's text and its YAML tree, whose nodes know their lines."""

    path: str
    lines: tuple[str, ...]
    root: Node

    @classmethod
    def parse(cls, text: str, path: str) -> SpecText:
        """The spec's text parsed once per run: every strategy of a spec reads the same file."""
        lines, root = _parsed(text, path)
        return cls(path, lines, root)

    @classmethod
    def of(cls, source: Source) -> SpecText:
        """A loaded spec's text with the YAML tree it was loaded with (parsed again only for a
        source loaded without one)."""
        if source.tree is None:
            return cls.parse(source.text, source.path)
        return cls(source.path, tuple(source.text.splitlines()), source.tree)

    def _comment_line(self, index: int) -> str | None:
        """The text of a line that holds only a comment, else None (0-based index)."""
        stripped = self.lines[index].strip()
        return stripped[1:].strip() if stripped.startswith("#") else None

    def note(self, line: int) -> str:
        """What the spec says of the key on ``line`` (counted from 1): the comment lines
        directly above it, then the comment after it."""
        index = line - 1
        if not 0 <= index < len(self.lines):
            return ""
        above: list[str] = []
        start = index - 1
        while start >= 0 and (comment := self._comment_line(start)) is not None:
            if self.lines[start].startswith(EDITOR_HINT):
                break
            above.insert(0, comment)
            start -= 1
        if start < 0:
            above = []  # the file's own header, not a note on its first key
        after = trailing_comment(self.lines[index])
        return _paragraphs([*above, *([after] if after else [])])

    def header(self) -> str:
        """The comment block that opens the file: what the spec says of itself."""
        comments: list[str] = []
        for index in range(len(self.lines)):
            if self.lines[index].startswith(EDITOR_HINT):
                continue
            comment = self._comment_line(index)
            if comment is None:
                break
            comments.append(comment)
        return _paragraphs(comments)

    def entry(self, section: str, name: str) -> Node | None:
        """The mapping of the entry called ``name`` in a list section ('strategies',
        'backends', ...), or of the section itself when it is a mapping ('accelerator')."""
        if not self.root.is_map or section not in self.root.value:
            return None
        node = self.root.value[section]
        if node.is_map:
            return node if _name(node) == name else None
        for item in node.value if node.is_seq else ():
            if item.is_map and _name(item) == name:
                return item
        return None

    def backend(self, name: str) -> Node | None:
        """The mapping declaring backend ``name``: an entry of 'backends', or a strategy's
        'backend' mapping."""
        found = self.entry("backends", name)
        if found is not None:
            return found
        strategies = self.root.value.get("strategies") if self.root.is_map else None
        for item in strategies.value if strategies is not None and strategies.is_seq else ():
            backend = item.value.get("backend") if item.is_map else None
            if backend is not None and backend.is_map and _name(backend) == name:
                return backend
        return None

    def entry_note(self, node: Node) -> str:
        """The comment lines above an entry of a list (its first key's line)."""
        if not node.key_locs:
            return ""
        first = min(loc.line for loc in node.key_locs.values())
        index, comments = first - 2, list[str]()
        while index >= 0 and (comment := self._comment_line(index)) is not None:
            comments.insert(0, comment)
            index -= 1
        return _paragraphs(comments)


def _name(node: Node) -> Any:
    name = node.value.get("name")
    return name.value if name is not None else None


@dataclass(frozen=True)
class Fact:
    """One thing a spec declares: its key path, its value as written, and its note."""

    key: str
    value: str
    note: str


def value_text(node: Node) -> str:
    """A value as a reader would write it: scalars as YAML writes them, lists comma-separated,
    mappings as 'key: value' pairs."""
    value = node.value
    if isinstance(value, dict):
        return "; ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def facts(text: SpecText, node: Node, skip: frozenset[str] = frozenset()) -> Iterator[Fact]:
    """Every fact of a mapping in the order written, nested mappings written over several
    lines key by key (``precision.probes.bf16-mixed``); a key without a note of its own takes
    the note of the mapping it is in."""
    yield from _facts(text, node, "", "", skip)


def _facts(text: SpecText, node: Node, prefix: str, inherited: str, skip: frozenset[str]) -> Any:
    for key, value in node.value.items():
        path = f"{prefix}{key}"
        if path in skip:
            continue
        line = node.key_locs[key].line
        note = text.note(line) or inherited
        if value.is_map and value.value and min(loc.line for loc in value.key_locs.values()) > line:
            yield from _facts(text, value, f"{path}.", note, skip)
        elif value.is_seq and value.value and all(item.is_map for item in value.value):
            for item in value.value:
                item_lines = sorted({loc.line for loc in item.key_locs.values()})
                item_note = _paragraphs([text.note(n) for n in item_lines]) or note
                yield Fact(path, value_text(item), item_note)
        else:
            yield Fact(path, value_text(value), note)


@functools.cache
def _parsed(text: str, path: str) -> tuple[tuple[str, ...], Node]:
    """A spec's lines and YAML tree, parsed once per run (keyed by what ``parse`` is given, not
    by the class it builds: mypy holds a class object to be no cache key)."""
    return tuple(text.splitlines()), load_yaml(text, path)
