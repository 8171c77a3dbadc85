"""Format generated Python as black does, remembering black's layouts by content.

stratgen's own templates write black's layout (string quotes, spacing, blank lines, one
statement a line) but for the statements black is to lay out: those on several lines, too long
for one, or with a trailing comma to explode (``long_statements``). Only those go to black, all
of a run in one pass per indentation (a statement several files share, once), and black is not
imported when there are none. Files
from a project's own templates are formatted whole.

This is one of stratgen's two caches (the other: compiled templates, ``templating``). What
black makes of a statement (or of a whole file) is a pure function of its text, the black
version and the mode, so it is remembered under a hash of those, in one file per project in
the user's cache folder (``STRATGEN_CACHE_DIR``; empty: no cache). **An entry is never stale**: a different text, black version or mode is a different key.
A regeneration whose edit leaves the long statements alone, and every check after a generate,
do not import black. The file is written whole or not at all and carries a hash of its content:
a missing, damaged or foreign one only costs the time of formatting again.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from .user_cache import black_version, cache_folder, make_folder, trusted_file

LINE_LENGTH = 100
#: The layout of the file of remembered layouts and of its keys; bumped when either changes.
_LAYOUT = b"stratgen-black-v4"
#: How many layouts a project's file keeps at the most (each some hundred bytes): the built-in
#: specs use about 170, a project of a hundred device specs more about 750 (440 KiB).
MOST_LAYOUTS = 5_000


class FormatError(Exception):
    """black rejected generated code: a template bug, never a user error."""


def cache_dir() -> Path | None:
    """The user's stratgen cache (``user_cache.cache_folder``), or None without one."""
    folder = cache_folder()
    return None if folder is None else Path(folder)


class Formatter:
    """black's layout of generated files. ``hits`` counts the files whose every long statement
    black had laid out before (remembered), ``misses`` those that black formatted, in part or
    whole; a file with nothing for black to lay out counts as neither."""

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
        """Add the layouts this run made to the project's file. What this run did not use is
        kept too (another target or an earlier version of a spec may need it again), up to
        ``MOST_LAYOUTS``; past that the file starts again from what this run used."""
        if self._file is None or self._stored is None or self._used.keys() <= self._stored.keys():
            return
        table = {**self._stored, **self._used}
        if len(table) > MOST_LAYOUTS:
            table = dict(self._used)
        payload = json.dumps(table, sort_keys=True, ensure_ascii=False).encode("utf-8")
        _write_atomic(self._file, _wrap(payload, self._name))
        self._stored = table

    def format(self, source: str, name: str) -> str:
        return self.format_all([(source, name)])[0]

    def format_all(self, items: list[tuple[str, str]]) -> list[str]:
        """Format every (source, name) pair, what black is to lay out in one pass."""
        enabled = gc.isenabled()
        gc.disable()  # black leaves much cyclic garbage: collected once, at the end
        try:
            sources = [source for source, _ in items]
            laid_out = self._whole(sources) if self.whole else self._lay_out(sources)
        finally:
            if enabled:
                gc.enable()
        for (_, name), outcome in zip(items, laid_out, strict=True):
            if isinstance(outcome, Exception):
                raise FormatError(f"{name}: generated code is not valid Python: {outcome}")
        return [str(outcome) for outcome in laid_out]

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
        has them (``tests/generator/codegen/test_format_once.py`` checks that a second pass
        changes nothing)."""
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
        """Each source with its long statements laid out by black: from what is remembered of
        the file (where its long statements are, and each one's layout), else by finding them
        (``long_statements``) and laying out those not remembered."""
        results: list[str | Exception | None] = [self._placed(source) for source in sources]
        missing = [index for index, result in enumerate(results) if result is None]
        for index, result in zip(
            missing, self._find_and_lay_out([sources[i] for i in missing]), strict=True
        ):
            results[index] = result
        return [result for result in results if result is not None]

    def _placed(self, source: str) -> str | None:
        """``source`` formatted from remembered layouts alone, without parsing it; None unless
        the file and every one of its long statements are remembered."""
        whole = self._remembered(_statement_key(-1, source))
        if whole is not None:
            self.hits += 1
            return whole
        places = self._remembered(_places_key(source))
        if places is None:
            return None
        spans = [(int(first), int(last), str(key)) for first, last, key in json.loads(places)]
        texts = [self._remembered(key) for _, _, key in spans]
        if any(text is None for text in texts):
            return None
        lines = source.split("\n")
        for (first, last, _), text in sorted(zip(spans, texts, strict=True), reverse=True):
            lines[first : last + 1] = [str(text)]
        self.hits += bool(spans)
        # black ends a file with one newline, however many blank lines the template left
        return "\n".join(lines).rstrip("\n") + "\n"

    def _find_and_lay_out(self, sources: list[str]) -> list[str | Exception]:
        """Each source with its long statements found and laid out by black. What is not
        remembered is formatted together, one black pass per indentation (at the left margin,
        in a line length shortened by the indentation, which is how black measures an indented
        line). Where each file's long statements are is remembered too."""
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
            if isinstance(statements, Exception):
                continue
            if not statements:
                self._used[_places_key(sources[index])] = "[]"
                continue
            lines = lines_of[index]
            moved = [(statement, _at_margin(lines, statement)) for statement in statements]
            texts = [(statement, text) for statement, text in moved if text is not None]
            if len(texts) < len(moved):  # a string's line left of its statement: not movable
                whole[index] = self._whole([sources[index]])[0]
                continue
            by_statement.append(index)
            places = []
            for statement, text in texts:
                key = _statement_key(statement.column, text)
                places.append([statement.first, statement.last, key])
                remembered = self._remembered(key)
                if remembered is not None:
                    laid_out[(index, statement.first)] = remembered
                else:
                    todo.setdefault(statement.column, []).append((index, statement, text, key))
            self._used[_places_key(sources[index])] = json.dumps(places)
        failed: dict[int, Exception] = {}
        for column, group in todo.items():
            # A statement several files share (the same text at the same indentation) goes to
            # black once.
            texts_of = {key: text for _, _, text, key in group}
            joined = f"\n{_SEPARATOR}\n".join(texts_of.values()) + "\n"
            result = self._black(joined, LINE_LENGTH - column)
            if isinstance(result, Exception):
                for index, *_ in group:  # a template bug: every file of the pass names it
                    failed.setdefault(index, result)
                continue
            pieces = result.split(f"\n{_SEPARATOR}\n")
            if len(pieces) != len(texts_of):  # pragma: no cover - black moved a separator
                raise FormatError("black merged two generated statements")
            layouts = dict(zip(texts_of, pieces, strict=True))
            for index, statement, _, key in group:
                out = layouts[key].strip("\n").split("\n")
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


def _places_key(source: str) -> str:
    """What is remembered of where the long statements of ``source`` are, and under which keys
    their layouts are."""
    digest = hashlib.sha256(f"{black_mode()}|places\0".encode())
    digest.update(source.encode("utf-8"))
    return digest.hexdigest()


def _load(path: Path, name: str) -> dict[str, str]:
    if not trusted_file(path):  # a layout ends up in generated code (``user_cache``)
        return {}
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    payload = _unwrap(data, name)
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
    """black's version and the mode stratgen runs it in, as formatter keys begin; the leading
    name changes whenever what this module makes of a source does."""
    return f"stratgen-black-v4|{LINE_LENGTH}|py311|{black_version()}"


# --- the file of remembered layouts ------------------------------------------------------------


def _wrap(payload: bytes, name: str) -> bytes:
    """The file's bytes: its layout, the project it belongs to and a hash of the payload, then
    the payload."""
    digest = hashlib.sha256(payload).hexdigest()
    return b"\0".join([_LAYOUT, name.encode(), digest.encode(), payload])


def _unwrap(data: bytes, name: str) -> bytes | None:
    """The payload of a file ``_wrap`` wrote for ``name``; None unless it is whole."""
    header = _LAYOUT + b"\0" + name.encode() + b"\0"
    if not data.startswith(header):
        return None
    digest, separator, payload = data[len(header) :].partition(b"\0")
    if not separator or digest != hashlib.sha256(payload).hexdigest().encode():
        return None
    return payload


def _write_atomic(path: Path, data: bytes) -> None:
    """Write the file whole or not at all (a temporary file renamed into place); a read-only
    or full cache folder only costs speed."""
    try:
        make_folder(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
