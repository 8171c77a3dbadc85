"""Fuzzing every string field of the spec model with hostile text, for every target.

The fields are found by walking the spec model (``stratgen.spec.model``) over a spec that
every target renders something of (``tests.support.untrusted.SEED_SPEC``): each field whose
type admits a string (a value, or a mapping's key), given or not in the seed, nested ones
included. Hypothesis puts into one to three of them strings that would end a docstring, a
comment, a literal or a Markdown construct, run as a template, or drive a terminal
(``HOSTILE``), Python's keywords and builtins, and text of its own. For each spec:

- ``stratgen generate`` ends with exit 0, or exit 2 and a location in the spec; never a
  traceback (the command runs in this process: any exception fails the test);
- every generated module compiles, and the pages render (Python-Markdown with the site's
  extensions) without an element or attribute from the spec;
- ``stratgen list`` prints no character a terminal acts on;
- no payload ran: the marker file never appears, neither while generating nor when every
  module of every generated package is imported (in one fresh process at the end).

Bounded for CI: ``EXAMPLES`` specs (about 20 seconds on one idle core), the same ones every run
(the suite's hypothesis profile is derandomized); ``STRATGEN_HYPOTHESIS_PROFILE=stratgen-long``
draws fresh ones, and ``STRATGEN_FUZZ_EXAMPLES`` sets how many.
"""

from __future__ import annotations

import copy
import dataclasses
import keyword
import os
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratgen.spec.model import SpecFile
from tests.support.generator import make_project, run_cli
from tests.support.untrusted import (
    HOSTILE,
    MARKER,
    control_characters,
    html_from_spec,
    import_packages,
    render_page,
    seed,
)

#: Specs generated per run.
EXAMPLES = int(os.environ.get("STRATGEN_FUZZ_EXAMPLES", "200"))
SPEC = "specs/acme.yaml"
#: How a refused spec's first line starts: the spec, a line and a column.
LOCATED = re.compile(rf"^error: {re.escape(SPEC)}(:\d+:\d+)?: ")


# --- where a string can go: the model walked over the seed ---------------------------------------


@dataclasses.dataclass(frozen=True)
class Position:
    """A place in the spec document a string can take: the value at ``path``, or (``key``)
    the key of the mapping entry at ``path``; ``free`` where the model takes any text there
    (a description, a default), not only a name or a word of a vocabulary."""

    path: tuple[str | int, ...]
    key: bool = False
    free: bool = dataclasses.field(default=False, compare=False)

    def __str__(self) -> str:
        text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path)
        return text.lstrip(".") + (" (key)" if self.key else "")


def _admits_string(annotation: Any) -> bool:
    """Whether a member type takes a string: text, a constrained name (``Annotated`` with its
    pattern) or a word of a vocabulary (a ``Literal``)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _admits_string(typing.get_args(annotation)[0])
    if annotation is str or annotation is Any:
        return True
    if typing.get_origin(annotation) is typing.Literal:
        return any(isinstance(a, str) for a in typing.get_args(annotation))
    return False


def _members(annotation: Any) -> list[Any]:
    """A union's members; a single type as one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    return [annotation]


def _container(annotation: Any) -> Any:
    """A type with its constraint (``Annotated``) taken off, to see what it holds."""
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def positions(cls: type, node: dict[str, Any], path: tuple[str | int, ...]) -> Iterator[Position]:
    """Every place under ``node`` (an object of the model class ``cls``) that takes a string."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        if field.metadata.get("internal"):
            continue
        yield from _positions(hints[field.name], node.get(field.name), (*path, field.name))


def _positions(annotation: Any, value: Any, path: tuple[str | int, ...]) -> Iterator[Position]:
    for member in _members(annotation):
        if _admits_string(member):
            yield Position(path, free=member is str or member is Any)
            continue
        member = _container(member)
        origin, arguments = typing.get_origin(member), typing.get_args(member)
        if dataclasses.is_dataclass(member) and isinstance(member, type):
            if value is None or isinstance(value, dict):  # absent ones are made when set
                yield from positions(member, value or {}, path)
        elif origin is tuple and isinstance(value, list):
            for index, item in enumerate(value):
                yield from _positions(arguments[0], item, (*path, index))
        elif origin is dict and isinstance(value, dict):
            for key, item in value.items():
                yield Position((*path, key), key=True)
                yield from _positions(arguments[1], item, (*path, key))


def put(document: dict[str, Any], position: Position, text: str) -> None:
    """Set the string at ``position`` (making absent objects on the way)."""
    node: Any = document
    for part in position.path[:-1]:
        if isinstance(node, dict) and node.get(part) is None:
            node[part] = {}
        node = node[part]
    last = position.path[-1]
    if position.key:
        items = list(node.items())
        node.clear()
        node.update({(text if k == last else k): v for k, v in items})
    else:
        node[last] = text


SEED = seed()
POSITIONS = sorted(set(positions(SpecFile, SEED, ())), key=str)
#: Where any text is taken: most of what is drawn goes there, to reach the generated files.
FREE = [p for p in POSITIONS if p.free]

# --- what goes there ------------------------------------------------------------------------------

NAMES = sorted(
    {*keyword.kwlist, *keyword.softkwlist, "print", "super", "args", "kwargs", "self", "os"}
    | {"REGISTRY", "ValueError", "get_strategy", "Any", "ClassVar", "__init__", "_"}
)
hostile_text = (
    st.sampled_from(HOSTILE)
    | st.sampled_from(NAMES)
    | st.text(
        alphabet=st.sampled_from(list("\"'\\`{}<>|#*_[]!:&\n\r\t\x00\x1b\u2028 aZ9")), max_size=24
    )
    | st.text(max_size=16)
    | st.tuples(st.sampled_from(HOSTILE), st.sampled_from(HOSTILE)).map("".join)
)


@st.composite
def hostile_specs(draw: Any) -> tuple[str, list[str]]:
    document = copy.deepcopy(SEED)
    changed = []
    places = st.sampled_from(FREE) | st.sampled_from(FREE) | st.sampled_from(FREE)
    places |= st.sampled_from(POSITIONS)
    for position in draw(st.lists(places, min_size=1, max_size=3)):
        text = draw(hostile_text)
        try:
            put(document, position, text)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change renamed or replaced what this one went into
        changed.append(f"{position} = {text!r}")
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True), changed


# --- the test ---------------------------------------------------------------------------------------


def test_the_model_walk_finds_every_kind_of_string_field() -> None:
    found = {str(p) for p in POSITIONS}
    for expected in (
        "accelerator.description",
        "accelerator.install",
        "accelerator.requires[0].install",
        "accelerator.step_hooks.after_backward",
        "backends[0].description",
        "strategies[0].description",
        "strategies[0].options.mode.doc",
        "strategies[0].options.mode.default",
        "strategies[0].options.mode.choices[1]",
        "strategies[0].options.mode (key)",
        "strategies[0].aliases.acme_ddp_slow.mode",
        "precision_plugins[0].description",
        "cluster_environments[0].description",
        "cluster_environments[0].detect.not_equal.ACME_MODE[0]",
        "cluster_environments[0].main_address.default",
    ):
        assert expected in found, expected
    assert len(found) > 80
    free = {str(p) for p in FREE}
    assert "strategies[0].description" in free and "accelerator.install" in free
    assert "strategies[0].name" not in free and "accelerator.is_available" not in free


def test_hostile_strings_in_any_field_run_nothing_and_break_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project", {"acme.yaml": ""})
    packages: list[str] = []
    accepted = refused = 0

    @settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
    @given(spec=hostile_specs())
    def generate_one(spec: tuple[str, list[str]]) -> None:
        nonlocal accepted, refused
        text, changed = spec
        # A package and an output folder of its own for each example: every package generated
        # is imported at the end, in one process.
        package = f"fuzz{len(packages) + 1}"
        config = (
            f'[tool.stratgen]\nspecs = "specs"\noutput = "{package}"\npackage = "{package}"\n'
            f'tests = "{package}/tests"\nbuiltin-specs = false\n'
            'targets = ["stratlib", "lightning", "deepspeed", "docs"]\n'
            f'docs = "{package}/docs"\n'
        )
        (root / "pyproject.toml").write_text(config, encoding="utf-8")
        (root / SPEC).write_text(text, encoding="utf-8")
        result = run_cli("generate", "--project", root, cwd=root)
        assert not (root / MARKER).exists(), f"generating ran a payload: {changed}"
        assert result.code in (0, 2), (changed, result.err)
        if result.code == 2:
            refused += 1
            assert LOCATED.match(result.err), (changed, result.err)
            return
        accepted += 1
        # A hooks module named by its path is imported as it is: one that is not installed
        # fails the import, by design (the generated code names it, nothing more).
        if not any(change.startswith("strategies[0].hooks ") for change in changed):
            packages.append(package)
        out = root / package
        for module in out.rglob("*.py"):
            compile(module.read_bytes(), str(module), "exec", dont_inherit=True)
        for page in (out / "docs").glob("*.md"):
            html = render_page(page.read_text(encoding="utf-8"))
            assert html_from_spec(html) == [], (changed, page.name)
        listed = run_cli("list", "--no-probe", "--project", root, cwd=root)
        assert listed.code == 0, (changed, listed.err)
        assert control_characters(listed.out + listed.err) == [], changed

    generate_one()
    assert accepted >= EXAMPLES // 5, f"only {accepted} of the specs were generated"
    assert refused, "no spec was refused: the hostile values reach no checked field"
    # Every module of every generated package, imported where a payload would leave its mark.
    imported = import_packages(root, [(package, root / package) for package in packages])
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.count("imported ") == len(packages)
    assert not (root / MARKER).exists(), "importing a generated package ran a payload"
