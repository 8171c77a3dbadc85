"""Format generated Python as black does, remembering black's layouts by content.

stratgen's own templates write black's layout (string quotes, spacing, blank lines, one
statement a line) but for the statements black is to lay out: those on several lines, too long
for one, or with a trailing comma to explode (``long_statements``). Only those go to black, all
of a run in one pass per indentation, and black is not imported when there are none. Files
from a project's own templates are formatted whole.

What black makes of a statement (or of a whole file) is a pure function of its text, the black
version and the mode, so it is remembered under a hash of those, in one file per project in
the cache folder (``STRATGEN_CACHE_DIR``): a regeneration whose edit leaves those statements
alone does not import black. The file is written whole or not at all, and a missing, damaged or
foreign one only costs the time of formatting again.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .paths import black_version, cache_folder
from .speccache import read_own, unwrap, wrap, write_atomic

LINE_LENGTH = 100
#: The layout of the file of remembered layouts and of its keys; bumped when either changes.
_LAYOUT = b"stratgen-black-v4"
#: How many layouts a project's file keeps at the most (each some hundred bytes): the built-in
#: specs use about 170, a project of a hundred device specs more about 750 (440 KiB).
MOST_LAYOUTS = 5_000


class FormatError(Exception):
    """black rejected generated code: a template bug, never a user error."""


def cache_dir() -> Path | None:
    """The user's stratgen cache (``paths.cache_folder``), or None without one."""
    folder = cache_folder()
    return None if folder is None else Path(folder)


class Formatter:
    """black's layout of generated files. ``hits`` counts the files whose layout was at hand
    (in the checkout, or each statement for black remembered), ``misses`` those that black
    formatted, in part or whole; a file with nothing for black to lay out counts as neither."""

    def __init__(
        self, cache: Path | None = None, use_cache: bool = True, whole: bool = False
    ) -> None:
        #: Format whole files with black: for sources from templates other than stratgen's own,
        #: which are not held to black's layout.
        self.whole = whole
        self.cache = (cache or cache_dir()) if use_cache else None
        self.hits = 0
        self.misses = 0
        self._mode: Any = None
        self._file: Path | None = None
        self._name = ""
        self._stored: dict[str, str] | None = None  # read on first use
        self._used: dict[str, str] = {}

    def open(self, project: str) -> None:
        """Remember layouts in the file of ``project`` (a name) in the cache folder."""
        if self.cache is not None:
            self._file, self._name = self.cache / "layouts" / project, project

    def save(self) -> None:
        """Add the layouts this run made to the project's file. A run that takes files from the
        render memo lays out only the others, so what it did not use is kept too, up to
        ``MOST_LAYOUTS``; past that the file starts again from what this run used."""
        if self._file is None or self._stored is None or self._used.keys() <= self._stored.keys():
            return
        table = {**self._stored, **self._used}
        if len(table) > MOST_LAYOUTS:
            table = dict(self._used)
        payload = json.dumps(table, sort_keys=True, ensure_ascii=False).encode("utf-8")
        write_atomic(self._file, wrap(payload, self._name, _LAYOUT))
        self._stored = table

    def key(self, source: str) -> str:
        """What the formatted text of ``source`` is known under (the manifest records it for
        every generated file): its hash with black's version and mode."""
        digest = hashlib.sha256()
        digest.update(black_mode().encode())
        digest.update(b"|whole\0" if self.whole else b"\0")
        digest.update(source.encode("utf-8"))
        return digest.hexdigest()

    def format(self, source: str, name: str) -> str:
        return self.format_all([(source, name)])[0]

    def format_all(
        self, items: list[tuple[str, str]], known: Mapping[str, str] | None = None
    ) -> list[str]:
        """Format every (source, name) pair; ``known`` maps keys to formatted texts already at
        hand (the generated files of a checkout). The rest is laid out in one pass."""
        known = known if known is not None else {}
        results: list[str | None] = [known.get(self.key(source)) for source, _ in items]
        missing = [i for i, result in enumerate(results) if result is None]
        self.hits += len(items) - len(missing)
        enabled = gc.isenabled()
        gc.disable()  # black leaves much cyclic garbage: collected once, at the end
        try:
            sources = [items[i][0] for i in missing]
            laid_out = self._whole(sources) if self.whole else self._lay_out(sources)
        finally:
            if enabled:
                gc.enable()
        for index, outcome in zip(missing, laid_out, strict=True):
            if isinstance(outcome, Exception):
                name = items[index][1]
                raise FormatError(f"{name}: generated code is not valid Python: {outcome}")
            results[index] = outcome
        return [str(result) for result in results]

    # -- black, and what it made before ---------------------------------------------------------

    def _remembered(self, key: str) -> str | None:
        if self._stored is None:
            self._stored = _load(self._file, self._name) if self._file is not None else {}
        found = self._stored.get(key)
        if found is not None:
            self._used[key] = found
        return found

    def _black(self, source: str, line_length: int = LINE_LENGTH) -> str | Exception:
        """black's formatting of ``source``, in one pass (importing black on first use):
        ``black.format_str`` formats its own output a second time, which only matters for code
        whose optional trailing commas black turns into magic ones, and generated code never
        has them (``tests/test_format_once.py`` checks that a second pass changes nothing)."""
        import black

        if self._mode is None:
            self._mode = black.Mode(
                line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311}
            )
        mode = self._mode
        if line_length != LINE_LENGTH:
            mode = dataclasses.replace(mode, line_length=line_length)
        once = getattr(black, "_format_str_once", None) or black.format_str
        try:
            return str(once(source, mode=mode))
        except Exception as exc:  # black raises several types for invalid code
            return exc

    def _whole(self, sources: list[str]) -> list[str | Exception]:
        results: list[str | Exception] = []
        for source in sources:
            key = _statement_key(-1, source)
            remembered = self._remembered(key)
            if remembered is not None:
                self.hits += 1
                results.append(remembered)
                continue
            self.misses += 1
            result = self._black(source)
            if isinstance(result, str):
                self._used[key] = result
            results.append(result)
        return results

    def _lay_out(self, sources: list[str]) -> list[str | Exception]:
        """Each source with its long statements laid out by black. What is not remembered is
        formatted together, one black pass per indentation (at the left margin, in a line
        length shortened by the indentation, which is how black measures an indented line)."""
        found: list[list[Statement] | Exception] = []
        for source in sources:
            try:
                found.append(long_statements(source))
            except SyntaxError as exc:
                found.append(exc)
        lines_of = [source.split("\n") for source in sources]
        laid_out: dict[tuple[int, int], str] = {}
        todo: dict[int, list[tuple[int, Statement, str, str]]] = {}  # column -> for black
        whole: dict[int, str | Exception] = {}  # sources black formats whole
        by_statement: list[int] = []  # sources with statements laid out one by one
        for index, statements in enumerate(found):
            if isinstance(statements, Exception) or not statements:
                continue
            lines = lines_of[index]
            moved = [(statement, _at_margin(lines, statement)) for statement in statements]
            texts = [(statement, text) for statement, text in moved if text is not None]
            if len(texts) < len(moved):  # a string's line left of its statement: not movable
                whole[index] = self._whole([sources[index]])[0]
                continue
            by_statement.append(index)
            for statement, text in texts:
                key = _statement_key(statement.column, text)
                remembered = self._remembered(key)
                if remembered is not None:
                    laid_out[(index, statement.first)] = remembered
                else:
                    todo.setdefault(statement.column, []).append((index, statement, text, key))
        failed: dict[int, Exception] = {}
        for column, group in todo.items():
            joined = f"\n{_SEPARATOR}\n".join(text for _, _, text, _ in group) + "\n"
            result = self._black(joined, LINE_LENGTH - column)
            if isinstance(result, Exception):
                for index, *_ in group:  # a template bug: every file of the pass names it
                    failed.setdefault(index, result)
                continue
            pieces = result.split(f"\n{_SEPARATOR}\n")
            if len(pieces) != len(group):  # pragma: no cover - black moved a separator
                raise FormatError("black merged two generated statements")
            for (index, statement, _, key), piece in zip(group, pieces, strict=True):
                out = piece.strip("\n").split("\n")
                if statement.stub:
                    out = out[:-1]
                text = "\n".join(" " * column + line if line else line for line in out)
                laid_out[(index, statement.first)] = self._used[key] = text
        formatted = {index for group in todo.values() for index, *_ in group}
        self.misses += len(formatted)
        self.hits += len(by_statement) - len(formatted)
        results: list[str | Exception] = []
        for index, statements in enumerate(found):
            if index in whole:
                results.append(whole[index])
                continue
            if isinstance(statements, Exception) or index in failed:
                results.append(statements if isinstance(statements, Exception) else failed[index])
                continue
            lines = lines_of[index]
            for statement in sorted(statements, key=lambda s: -s.first):
                lines[statement.first : statement.last + 1] = [laid_out[(index, statement.first)]]
            # black ends a file with one newline, however many blank lines the template left
            results.append("\n".join(lines).rstrip("\n") + "\n")
        return results


# --- the statements black is to lay out ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Statement:
    """Lines ``first`` to ``last`` (0-based, inclusive) of a source: one statement that black
    is to lay out, indented by ``column``. ``stub`` marks a class's or function's header, which
    black lays out apart from the body (it is formatted with a stand-in body)."""

    first: int
    last: int
    column: int
    stub: bool = False


#: The body a header is formatted with: one black never joins to it.
_STUB_BODY = "pass"
#: Between two statements formatted in one pass: a line black keeps as it is.
_SEPARATOR = "# -- stratgen: next statement --"
#: A trailing comma before a closing bracket on one line: templates write one where black is
#: to lay the brackets' content out one item a line.
_MAGIC_COMMA = re.compile(r",\s+[)\]}]")


def _for_black(line: str) -> bool:
    """Whether black would lay ``line`` out otherwise: longer than the line length (counted
    generously for text that is not ASCII, of which black counts a wide character twice), or
    with a trailing comma that black takes as a call to lay its brackets out one item a line."""
    if _MAGIC_COMMA.search(line):
        return True
    if line.isascii():
        return len(line) > LINE_LENGTH
    return 2 * len(line) > LINE_LENGTH


def long_statements(source: str) -> list[Statement]:
    """The statements of ``source`` that black is to lay out: those on several lines, and those
    with a line too long or a trailing comma to explode (``_for_black``); a class's or function's
    header is one on its own. Docstrings and other lone strings are left out (black does not
    split them). Raises SyntaxError for a source that is not Python."""
    lines = source.split("\n")  # as ast counts lines: a string's U+2028 does not end one
    found: list[Statement] = []

    def for_black(first: int, last: int) -> bool:
        return last > first or any(_for_black(line) for line in lines[first : last + 1])

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                header_last = node.body[0].lineno - 2
                while header_last > first and not lines[header_last].strip():
                    header_last -= 1
                if for_black(first, header_last):
                    found.append(Statement(first, header_last, node.col_offset, stub=True))
                visit(node.body)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue
            elif for_black(first, last):
                found.append(Statement(first, last, node.col_offset))

    visit(ast.parse(source).body)
    return found


def _at_margin(lines: list[str], statement: Statement) -> str | None:
    """The statement's text moved to the left margin (a header with its stand-in body); None
    when a line of it starts left of its column (inside a multi-line string)."""
    column = statement.column
    own = lines[statement.first : statement.last + 1]
    if any(line[:column].strip() for line in own):
        return None
    text = "\n".join(line[column:] for line in own)
    return f"{text}\n    {_STUB_BODY}" if statement.stub else text


def _statement_key(column: int, text: str) -> str:
    """What black's layout of ``text`` (at the left margin, to be indented by ``column``; -1 for
    a whole file) is remembered under."""
    digest = hashlib.sha256(f"{black_mode()}|{column}\0".encode())
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def _load(path: Path, name: str) -> dict[str, str]:
    data = read_own(path)
    payload = unwrap(data, name, _LAYOUT) if data is not None else None
    if payload is None:
        return {}
    try:
        table = json.loads(payload)
    except ValueError:  # another layout's payload under a whole hash
        return {}
    if not isinstance(table, dict):
        return {}
    return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, str)}


def black_mode() -> str:
    """black's version and the mode stratgen runs it in, as formatter keys begin."""
    return f"stratgen-black-v4|{LINE_LENGTH}|py311|{black_version()}"
