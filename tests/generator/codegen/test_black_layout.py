"""stratgen's own templates write black's layout and leave black only the statements it is to lay
out (``stratgen.codegen.formatting``): those on several lines, too long for one, or with a trailing comma to
explode. Checked here against black itself, on statements built from values hypothesis draws
(the literals of ``stratgen.codegen.python_source.literal``, as spec values become code), at the left margin,
in a class body and in a function body."""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import Any

import black
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratgen.codegen.formatting import LINE_LENGTH, Formatter, long_statements
from stratgen.codegen.python_source import literal, string_literal
from tests.support.generator import MINIMAL_BASE, REPO, run_cli

MODE = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**15), 10**15)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6)
    | st.lists(inner, max_size=6).map(tuple)
    | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=24,
)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,30}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name)
)


def expression(value: Any, call: str | None) -> str:
    """``value`` as code, or as the argument list of a call to ``call``."""
    if call is None:
        return literal(value)
    items = value if isinstance(value, list | tuple) else [value]
    return f"{call}({', '.join(literal(item) for item in items)})"


@st.composite
def modules(draw: Any) -> str:
    """A module of one-line statements as stratgen's templates write them, with black's blank
    lines: one between statements, two around a class or function."""
    text = '"""A module."""\n'
    block = False
    for _ in range(draw(st.integers(1, 4))):
        value = draw(values)
        call = draw(st.none() | st.sampled_from(["Requirement", "f", "StrategyRow"]))
        annotation = draw(st.sampled_from(["", ": Any", ": ClassVar[tuple[str, ...]]"]))
        statement = f"{draw(names)}{annotation} = {expression(value, call)}"
        where = draw(st.sampled_from(["module", "class A:", "def f() -> None:"]))
        if where == "module":
            text += ("\n\n" if block else "\n") + statement + "\n"
            block = False
        else:
            text += f"\n\n{where}\n    {statement}\n"
            block = True
    return text


@settings(max_examples=300, deadline=None)
@given(source=modules())
def test_long_statements_laid_out_as_black_lays_out_the_file(source: str) -> None:
    compile(source, "module.py", "exec")
    formatted = Formatter(use_cache=False).format(source, "module.py")
    assert formatted == black.format_str(source, mode=MODE)


@settings(max_examples=100, deadline=None)
@given(sources=st.lists(modules(), min_size=1, max_size=3), picks=st.lists(st.integers(0, 2)))
def test_files_formatted_together_as_black_formats_each(
    sources: list[str], picks: list[int]
) -> None:
    """One run formats many files, each statement that several of them share once."""
    files = sources + [sources[pick % len(sources)] for pick in picks]
    items = [(source, f"module{index}.py") for index, source in enumerate(files)]
    formatted = Formatter(use_cache=False).format_all(items)
    assert formatted == [black.format_str(source, mode=MODE) for source in files]


@settings(max_examples=500, deadline=None)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=30))
def test_string_literals_are_blacks(text: str) -> None:
    code = string_literal(text)
    assert eval(code) == text  # noqa: S307 - a literal this test made
    assert black.format_str(f"x = {code}\n", mode=MODE) == f"x = {code}\n"


def test_only_what_black_is_to_lay_out_goes_to_black() -> None:
    short = 'x = ("a", "b")\n'
    long = f"y = {literal(tuple('abcdefghijklmnopqrstuvwxyz'))}\n"
    exploded = "z = f(\n    1,\n)\n"
    magic = "w = (a, b, )\n"
    header = "def g(\n    a: int,\n) -> None:\n    pass\n"
    doc = f'"""{"long " * 30}"""\n'
    statements = long_statements(short + long + exploded + magic + header + doc)
    assert [(s.first, s.last, s.stub) for s in statements] == [
        (1, 1, False),
        (2, 4, False),
        (5, 5, False),
        (6, 8, True),
    ]


def test_code_that_is_not_python_is_an_error() -> None:
    with pytest.raises(SyntaxError):
        long_statements("x = (\n")


def test_a_projects_own_templates_are_formatted_by_black_whole(tmp_path: Path) -> None:
    """stratgen's templates are held to black's layout; a project's own are not, so black
    formats every file of a project that has them, whole."""
    root = tmp_path / "project"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "base.yaml").write_text(MINIMAL_BASE, encoding="utf-8")
    (root / "tpl" / "package").mkdir(parents=True)
    builtin = (
        REPO / "generator" / "stratgen" / "templates" / "package" / "__init__.py.j2"
    ).read_text(encoding="utf-8")
    (root / "tpl" / "package" / "__init__.py.j2").write_text(
        builtin + "\nEXTRA={'a':[1,2]}\n", encoding="utf-8"
    )
    (root / "pyproject.toml").write_text(
        '[tool.stratgen]\ntemplates = "tpl"\nbuiltin-specs = false\n', encoding="utf-8"
    )
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    init = (root / "generated" / "stratlib" / "__init__.py").read_text(encoding="utf-8")
    assert init.endswith('\nEXTRA = {"a": [1, 2]}\n')
    assert black.format_str(init, mode=MODE) == init


def test_a_statement_whose_string_spans_lines_left_of_it_is_formatted_with_its_file() -> None:
    source = 'class A:\n    x = f(\n        """one\ntwo""",\n    )\n'
    formatted = Formatter(use_cache=False).format(source, "module.py")
    assert formatted == black.format_str(source, mode=MODE)
    assert "\ntwo" in formatted
