"""No hand-written module grows past ``MAX_CODE_LINES`` lines of code.

What is counted is code alone: docstrings, comments and blank lines are not, so that no
explanation is ever shortened, and no module split, to stay under the ceiling. A module holds
one concept, however long that takes, with sections and a map at the top where it is long;
the ceiling sits well above any cohesive module and only stops one that has grown into several.

The rule is data: the files it covers (every tracked Python file) and those it leaves out
(``NOT_COUNTED``: generated tests, tables of cases that grow with the specs, and the data of
the generator's tests).
"""

from __future__ import annotations

import ast
import io
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_CODE_LINES = 700
#: Path prefixes (relative to the repository, '/'-separated) of tracked files not counted.
NOT_COUNTED = (
    "generated/tests/",
    "tests/generator/golden/",
    "tests/generator/fixtures/",
)
#: Tokens that are not code.
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The lines of every docstring (a module's, a class's or a function's first statement,
    when it is a string)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str) -> int:
    """How many lines of ``source`` hold code: not blank, not only a comment, not a line of a
    docstring."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - _docstring_lines(ast.parse(source)))


def test_only_code_is_counted() -> None:
    source = (
        '"""A module\n\nwith a long docstring."""\n'
        "\n"
        "# a comment\n"
        "X = 1  # a trailing comment\n"
        "\n"
        "def f():\n"
        '    """What f does."""\n'
        '    return """a string\n'
        'over two lines"""\n'
    )
    assert code_lines(source) == 4  # X, def, and the string f returns on its two lines


def test_no_module_over_the_limit() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(tracked) > 100, "git ls-files found too few modules; is this a checkout?"
    too_long = {
        name: length
        for name in tracked
        if not name.startswith(NOT_COUNTED)
        and (length := code_lines((REPO / name).read_text(encoding="utf-8"))) > MAX_CODE_LINES
    }
    assert not too_long, (
        f"modules over {MAX_CODE_LINES} lines of code, docstrings and comments left out (one "
        f"concept a module: split the one that holds several): {too_long}"
    )
