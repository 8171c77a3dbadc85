"""Python source from plain values: literals, docstrings, import blocks, and the description
of a module (``PyModule``) that ``templates/package/module.py.j2`` writes out.

Values from specs reach the code only through one escaping function per context: literals made
by ``literal`` (Python's own ``repr``), docstring text escaped by ``docstring_body`` (or
``docstring`` for wrapped paragraphs), comment text by ``comment_text``, or names the model has
already validated as identifiers (and ``resolve.reserved_names`` as names that shadow nothing);
nothing from a spec is ever evaluated or rendered as a template. A docstring is a ``DocSource``,
which only those functions make, so a raw text cannot become one (mypy says so), and every
generated module is compiled before anything is written (``project.Project.plan``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NewType

from ..resolve.runtime_facts import class_annotations

#: Text escaped to sit verbatim between the triple quotes of a docstring: made only by
#: ``docstring_body`` and the functions built on it.
DocSource = NewType("DocSource", str)

#: The runtime package every generated package imports.
RUNTIME_PACKAGE = "stratcore"


# --- literals and docstrings -----------------------------------------------------------------


def literal(value: Any) -> str:
    """Python source for a plain value from a spec."""
    if isinstance(value, str):
        return string_literal(value)
    if value is None or isinstance(value, bool | int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value).replace("e+", "e")  # black writes 1e16, not 1e+16
    if isinstance(value, tuple | list):
        items = [literal(v) for v in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as a literal")


def string_literal(text: str) -> str:
    """``text`` as a string literal in black's style: double quotes, unless they would take
    more backslashes than single ones."""
    doubles, singles = text.count('"'), text.count("'")
    if doubles and (not singles or doubles > singles):
        return repr(text)  # single quotes: with no "'" in the text, repr chooses them
    if not doubles and "\\" not in text and text.isprintable():
        return f'"{text}"'  # nothing to escape (repr escapes what is not printable)
    body = "".join(
        '\\"' if char == '"' else "'" if char == "'" else repr(char)[1:-1] for char in text
    )
    return f'"{body}"'


#: The width docstrings are wrapped to.
DOC_WIDTH = 96

_DOC_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\r": "\\r"}
#: A character ``_escape_doc_char`` changes: a backslash, a control character, a byte-order
#: mark, or white space other than a space or a line break.
_ESCAPED_DOC_CHAR = re.compile(r"[\\\x00-\x1f\x7f-\x9f\ufeff]|[^\S \n]")


def docstring_body(text: str, indent: str) -> DocSource:
    """Escape ``text`` so that it sits verbatim inside a triple-quoted docstring, through black.

    Backslashes, control characters and white space other than plain spaces are escaped. So
    are quotes that could end the docstring or that black would pad (one followed by another,
    one at the start or the end of the text), and the spaces that black strips or re-indents:
    leading spaces of the first line, trailing spaces of every line, and the first leading
    space of continuation lines when every one of them is indented. Continuation lines are
    indented by ``indent``, which ``inspect.cleandoc`` removes again; a text whose
    continuation lines are all empty is written on one line, its line breaks as escapes.
    """
    raw_lines = text.split("\n")
    rest = [line for line in raw_lines[1:] if line.strip(" ")]
    indented = bool(rest) and all(line.startswith(" ") for line in rest)
    lines = []
    for number, raw in enumerate(raw_lines):
        last_line = number == len(raw_lines) - 1
        content = raw.lstrip(" ")
        lead = len(raw) - len(content)
        trail = len(raw) - len(raw.rstrip(" "))
        if not (lead or trail or '"' in raw or _ESCAPED_DOC_CHAR.search(raw)):
            lines.append(raw)  # nothing to escape
            continue
        chars = [_escape_doc_char(c) for c in raw]
        for index, char in enumerate(raw):
            if char != '"':
                continue
            if last_line and index == len(raw) - 1:
                chars[index] = "\\x22"  # black pads a docstring that ends in a quote
            elif (number == 0 and index == 0) or raw[index + 1 : index + 2] == '"':
                chars[index] = '\\"'
        if lead and (number == 0 or not content):
            chars[:lead] = ["\\x20"] * lead
        elif lead and indented:
            chars[0] = "\\x20"
        if trail:
            chars[len(raw) - trail :] = ["\\x20"] * trail
        lines.append("".join(chars))
    if not any(lines[1:]):
        # black drops the lines of a docstring whose continuation lines are all blank; as
        # escapes, the line breaks survive.
        return DocSource("\\n".join(lines))
    body = lines[0]
    for line in lines[1:]:
        body += "\n" + (indent + line if line else "")
    return DocSource(body)


def docstring(
    paragraphs: Iterable[str],
    indent: str = "",
    first_width: int = DOC_WIDTH - 3,
    width: int = DOC_WIDTH,
) -> DocSource:
    """Paragraphs of text (from a spec, or naming what a spec gave) as a docstring: each wrapped
    at single spaces (its first line to ``first_width``, which leaves room for the quotes, the
    others to ``width``), blank lines between them, continuation lines indented by
    ``indent``, and escaped by ``docstring_body``."""
    wrapped = ["\n".join(wrap_exactly(p, first_width, width)) for p in paragraphs]
    return docstring_body("\n\n".join(wrapped), indent)


def _escape_doc_char(char: str) -> str:
    if char in _DOC_ESCAPES:
        return _DOC_ESCAPES[char]
    code = ord(char)
    if (
        code < 0x20
        or code == 0x7F
        or 0x80 <= code < 0xA0
        or char in "\ufeff"
        or (char.isspace() and char not in " \n")
    ):
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def comment_text(text: str) -> str:
    """``text`` made safe for one ``#`` comment line: line breaks and controls escaped."""
    return "".join(_escape_doc_char(c) if c != "\\" else c for c in text.replace("\t", " "))


def wrap_exactly(text: str, first_width: int, width: int) -> list[str]:
    """Wrap a one-line text at single spaces so that joining the lines with a space gives the
    text back exactly (runs of spaces, leading and trailing ones included)."""
    pieces = text.split(" ")
    lines: list[str] = []
    current = pieces[0]
    for piece in pieces[1:]:
        limit = width if lines else first_width
        if current and piece and len(current) + 1 + len(piece) > limit:
            lines.append(current)
            current = piece
        else:
            current = f"{current} {piece}"
    lines.append(current)
    return lines


# --- module descriptions ------------------------------------------------------------------------


@dataclass
class Imports:
    """Import statements of one module, grouped and sorted like isort would."""

    stdlib: set[str] = field(default_factory=set)
    third_party: set[str] = field(default_factory=set)
    local: dict[str, set[str]] = field(default_factory=dict)

    def add_local(self, module: str, name: str) -> None:
        """Import ``name`` from ``module``: a module of the runtime (``stratcore.*``), imported
        absolutely, or one of the generated package, given from its root ('backends')."""
        if module.partition(".")[0] == RUNTIME_PACKAGE:
            self.third_party.add(f"from {module} import {name}")
        else:
            self.local.setdefault(module, set()).add(name)

    def lines(self, module_path: str) -> list[list[str]]:
        """Import blocks for the module at ``module_path`` (e.g. 'strategies/ddp.py')."""
        future = "from __future__ import annotations"
        blocks = [[future]] if future in self.stdlib else []
        stdlib = _merged(self.stdlib - {future})
        if stdlib:
            blocks.append(stdlib)
        if self.third_party:
            blocks.append(_merged(self.third_party))
        local = []
        for module in sorted(self.local, key=lambda m: relative_module(module_path, m)):
            names = ", ".join(sorted(self.local[module]))
            local.append(f"from {relative_module(module_path, module)} import {names}")
        if local:
            blocks.append(local)
        return blocks


def relative_module(module_path: str, target: str) -> str:
    """The relative import of ``target`` ('core.strategy') from the file at ``module_path``."""
    here = module_path.split("/")[:-1]
    there = target.split(".")
    common = 0
    while common < len(here) and common < len(there) - 1 and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def sorted_names(names: Iterable[str]) -> list[str]:
    """Names imported from one module in isort's order: constants, classes, then the rest."""

    def kind(name: str) -> int:
        return 0 if name.isupper() else 1 if name[:1].isupper() else 2

    return sorted(names, key=lambda name: (kind(name), name))


def _import_sort_key(line: str) -> tuple[int, str, str]:
    # The whole line breaks ties between imports from one module: sets iterate in hash order.
    return (0 if line.startswith("import ") else 1, line.split()[1], line)


def _merged(lines: Iterable[str]) -> list[str]:
    """Import statements with one ``from`` line per module, sorted as isort sorts them."""
    plain = set()
    names: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("from "):
            module, _, imported = line[len("from ") :].partition(" import ")
            names.setdefault(module, set()).update(n.strip() for n in imported.split(","))
        else:
            plain.add(line)
    merged = [f"from {m} import {', '.join(sorted(n))}" for m, n in names.items()]
    return sorted(plain | set(merged), key=_import_sort_key)


@dataclass
class Param:
    name: str
    annotation: str
    default: str


@dataclass
class Init:
    """``__init__(self, *args, <keyword_only>, **kwargs)``: passes ``super_args`` and the rest
    on to the base, then sets ``assignments``."""

    keyword_only: list[Param]
    super_args: list[tuple[str, str]]
    assignments: list[tuple[str, str]]


@dataclass
class PyClass:
    name: str
    bases: list[str]
    doc: DocSource
    attributes: list[tuple[str, str, str]]  # (name, annotation, value)
    init: Init | None = None


@dataclass
class PyModule:
    """One generated Python file."""

    path: str  # relative to the package root, e.g. 'strategies/ddp.py'
    source: str  # what it was generated from, for the header
    doc: DocSource
    imports: Imports
    classes: list[PyClass]
    body: list[str] = field(default_factory=list)  # module-level assignments
    tail: list[str] = field(default_factory=list)  # module-level assignments after the classes
    all_names: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return self.path.count("/")


#: Standard-library modules whose names annotations may need.
_STDLIB_MODULES = ("typing", "types", "collections.abc")


def annotated(
    attributes: list[tuple[str, str]],
    root: tuple[str, str],
    imports: Imports,
    known: dict[str, tuple[str, tuple[tuple[str, str], ...]]] | None = None,
) -> list[tuple[str, str, str]]:
    """Give each class attribute the type its core base class declares for it (or ``known``
    gives: attribute -> (annotation, the (module, name) imports it needs)).

    Without the annotation, a type checker would take the value itself as the attribute's type
    in the generated class, and reject a subclass that sets another value."""
    declared = {**class_annotations(*root), **(known or {})}
    result = []
    for name, value in attributes:
        annotation, needs = declared[name]
        for module, imported in needs:
            if module in _STDLIB_MODULES:
                imports.stdlib.add(f"from {module} import {imported}")
            elif module == "typing":
                imports.stdlib.add(f"from typing import {imported}")
            else:
                imports.add_local(module, imported)
        result.append((name, annotation, value))
    return result


def class_doc(description: str, extra: list[str], args: list[tuple[str, str]]) -> DocSource:
    """A docstring: the spec's description verbatim, then generated sections (each line
    escaped)."""
    parts: list[str] = [docstring_body(description, "    ")]
    if extra:
        parts.append("\n".join("    " + docstring_body(line, "") if line else "" for line in extra))
    if args:
        arg_lines = ["    Args:"]
        for name, text in args:
            arg_lines.append(f"        {name}: " + option_doc(name, text))
        parts.append("\n".join(arg_lines))
    return DocSource("\n\n".join(parts))


ARG_INDENT = " " * 12


def option_doc(name: str, text: str) -> DocSource:
    """An option's text in the Args section, as docstring source.

    A one-line text is wrapped at single spaces; a text with line breaks keeps its own. Either
    way only line breaks and the indentation of continuation lines are added, so the text can
    be read back exactly.
    """
    if not text:
        return DocSource("Documented in the spec.")
    if "\n" in text:
        return docstring_body(text, ARG_INDENT)
    lines = wrap_exactly(text, DOC_WIDTH - 8 - len(name) - 2, DOC_WIDTH - len(ARG_INDENT))
    return docstring_body("\n".join(lines), ARG_INDENT)


def first_sentence(description: str) -> str:
    """The first sentence of a description's first paragraph, on one line, without its stop."""
    paragraph = re.split(r"\n\s*\n", description.strip(), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    match = re.search(r"[.!?](\s|$)", text)
    sentence = text[: match.start()] if match else text
    return sentence.rstrip(".")


def module_doc(class_name: str, description: str, fallback: str, what: str) -> DocSource:
    """A module docstring saying what the module offers: 'DDPStrategy: <the description's
    first sentence> (registry name "ddp").', wrapped, as docstring source."""
    summary = first_sentence(description) or fallback
    text = f"{class_name}: {summary} ({what})." if what else f"{class_name}: {summary}."
    return docstring([text])
