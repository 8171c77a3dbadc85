"""The located YAML loader: YAML 1.2 core-schema scalars, positions, and the limits that keep
hostile input from hanging or exhausting the generator."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from stratgen.spec import yaml_loader
from stratgen.spec.errors import Location, SpecError
from stratgen.spec.yaml_loader import MAX_BYTES, MAX_DEPTH, MAX_NODES, load_yaml
from tests.support.generator import BAD

REPO = Path(__file__).resolve().parents[3]


def _value(text: str) -> object:
    return load_yaml(f"key: {text}\n".encode(), "t.yaml").plain()["key"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("yes", "yes"),
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("true", True),
        ("False", False),
        ("0o17", 15),
        ("0x1F", 31),
        ("017", 17),
        ("1e3", 1000.0),
        ("-.5", -0.5),
        (".inf", float("inf")),
        ("~", None),
        ("null", None),
        ("2024-01-31", "2024-01-31"),
        ("1_000", "1_000"),
        ('"\\u00e9\\t"', "\u00e9\t"),
    ],
)
def test_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert _value(text) == value
    assert type(_value(text)) is type(value)


def test_locations_of_values_and_keys() -> None:
    node = load_yaml(b"a:\r\n  b: [1, 2]\r\n  c: x\r\n", "t.yaml")
    inner = node.value["a"]
    assert inner.key_locs["c"] == Location("t.yaml", 3, 3)
    assert inner.value["b"].value[1].loc == Location("t.yaml", 2, 10)


def test_empty_file_and_byte_order_mark() -> None:
    assert load_yaml(b"", "t.yaml").plain() == {}
    assert load_yaml(b"\xef\xbb\xbfversion: 1\n", "t.yaml").plain() == {"version": 1}


def test_a_quoted_merge_key_is_an_ordinary_key() -> None:
    assert load_yaml(b'"<<": 1\n', "t.yaml").plain() == {"<<": 1}


def test_text_input_gets_the_same_checks_as_bytes() -> None:
    with pytest.raises(SpecError, match="control character U\\+0001"):
        load_yaml("a: \x01\n", "t.yaml")


class _WorkBudget:
    """Counts the calls of the loader's per-node functions (pyyaml composing a node, the
    converter visiting one) while it is active, and stops the load, failing the test, past
    ``budget`` of them: how much work a refusal took, whatever the machine's load."""

    NODE_FUNCTIONS = ("compose_node", "convert")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.calls = 0

    def __enter__(self) -> _WorkBudget:
        sys.setprofile(self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)

    def _count(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":  # the profiler sees every call and return: the cheap test first
            return
        code = frame.f_code
        if code.co_name in self.NODE_FUNCTIONS and code.co_filename == yaml_loader.__file__:
            self.calls += 1
            if self.calls > self.budget:
                raise AssertionError(f"the loader visited more than {self.budget} nodes")


def _refusal(data: bytes, budget: int) -> tuple[str, int]:
    """The message refusing ``data``, and how many nodes the loader composed or visited."""
    with _WorkBudget(budget) as work, pytest.raises(SpecError) as info:
        load_yaml(data, "t.yaml")
    return str(info.value), work.calls


def test_oversized_files_are_refused_before_parsing() -> None:
    message, nodes = _refusal(b"a: " + b"x" * MAX_BYTES + b"\n", budget=0)
    assert f"specs are limited to {MAX_BYTES}" in message and nodes == 0


def test_limits_stop_early() -> None:
    # Each refusal stops at its limit: the nodes up to it, not the document's 100,000 levels,
    # the 20,010 values or the billion values of the expanded anchors.
    deep, nodes = _refusal(b"a: " + b"[" * 100_000 + b"]" * 100_000, budget=2 * MAX_DEPTH)
    # libyaml refuses this nesting itself, and pure Python reads it again for its message:
    # each stops at its limit.
    assert f"nesting deeper than {MAX_DEPTH} levels" in deep and nodes <= 2 * (MAX_DEPTH + 2)
    # The mapping is the first level: the bracket at column 3 + MAX_DEPTH is one too many.
    assert f"t.yaml:1:{3 + MAX_DEPTH}:" in deep, "not refused at the level past the limit"
    wide, nodes = _refusal(b"a: [" + b"1, " * (MAX_NODES + 10) + b"]\n", budget=2 * MAX_NODES)
    assert f"more than {MAX_NODES} values" in wide and nodes <= MAX_NODES + 1
    bomb_file = (BAD / "08_billion_laughs.yaml").read_bytes()
    bomb, nodes = _refusal(bomb_file, budget=4 * MAX_NODES)
    assert "expands to more than" in bomb and nodes <= 2 * MAX_NODES + 1


def test_errors_pickle_with_their_problems() -> None:
    import pickle

    with pytest.raises(SpecError) as info:
        load_yaml(b"a: 1\na: 2\n", "t.yaml")
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.problems == info.value.problems


# --- libyaml's events and pure Python's give the same nodes ------------------------------------


def _located(node: yaml.Node) -> object:
    """A composed node as comparable data: tag, value and position, all the way down. An empty
    value (``{b: }``, ``? ``) has no text to point at: libyaml places it a column or a line
    apart from pure Python, so its position is left out."""
    where: tuple[object, ...] = (node.tag, node.start_mark.line, node.start_mark.column)
    if isinstance(node, yaml.ScalarNode) and node.value == "" and node.tag.endswith("null"):
        where = (node.tag,)
    if isinstance(node, yaml.ScalarNode):
        return (*where, node.value, node.style or None)  # plain: None from one, "" from the other
    if isinstance(node, yaml.SequenceNode):
        return (*where, [_located(item) for item in node.value])
    return (*where, [(_located(k), _located(v)) for k, v in node.value])


def _both(text: str) -> tuple[object, object]:
    assert yaml_loader._FastLoader is not None
    results = []
    for loader in (yaml_loader._FastLoader, yaml_loader._Loader):
        try:
            root = loader(text).get_single_node()
        except (yaml.YAMLError, yaml_loader._LimitExceeded) as exc:
            results.append(type(exc).__name__)
            continue
        results.append(None if root is None else _located(root))
    return results[0], results[1]


needs_libyaml = pytest.mark.skipif(
    yaml_loader._FastLoader is None, reason="PyYAML is built without libyaml here"
)


@needs_libyaml
@pytest.mark.parametrize("spec", sorted(p.name for p in (REPO / "specs").glob("*.yaml")))
def test_libyaml_composes_every_builtin_spec_as_pure_python_does(spec: str) -> None:
    fast, pure = _both((REPO / "specs" / spec).read_text(encoding="utf-8"))
    assert fast == pure


#: Text YAML holds: plain words, quotes, indicators, non-ASCII and wide characters.
_PIECES = st.sampled_from(
    [
        "a",
        "b1",
        "-",
        ":",
        " ",
        "  ",
        "\n",
        "#",
        "'",
        '"',
        "[",
        "]",
        "{",
        "}",
        ",",
        "é",
        "漢",
        "&x",
        "*x",
        "|",
        ">",
        "? ",
    ]
)


@needs_libyaml
@settings(max_examples=300)
@given(
    st.recursive(
        st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none(), st.floats()),
        lambda children: st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=5), children, max_size=3),
        max_leaves=12,
    ),
    st.sampled_from([None, False, True]),
)
def test_libyaml_and_pure_python_agree_on_any_document(value: object, flow: bool | None) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True)
    fast, pure = _both(text)
    assert fast == pure, text


@needs_libyaml
@settings(max_examples=300)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_libyaml_and_pure_python_agree_on_broken_text(text: str) -> None:
    """Where both read a document they compose the same nodes; where libyaml refuses one, the
    loader reads it again with pure Python, whose message users see, so only agreeing
    successes matter."""
    fast, pure = _both(text)
    if not isinstance(fast, str) and not isinstance(pure, str):
        assert fast == pure, text
