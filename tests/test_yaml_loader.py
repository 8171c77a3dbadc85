"""The located YAML loader: YAML 1.2 core-schema scalars, positions, and the limits that keep
hostile input from hanging or exhausting the generator."""

from __future__ import annotations

import time

import pytest
from sgtest import BAD

from stratgen.errors import Location, SpecError
from stratgen.yamlload import MAX_BYTES, MAX_DEPTH, MAX_NODES, load_yaml


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


def _refusal(data: bytes) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_yaml(data, "t.yaml")
    return str(info.value), time.monotonic() - started


def test_oversized_files_are_refused_before_parsing() -> None:
    message, seconds = _refusal(b"a: " + b"x" * MAX_BYTES + b"\n")
    assert f"specs are limited to {MAX_BYTES}" in message and seconds < 1


def test_limits_stop_early() -> None:
    deep, seconds = _refusal(b"a: " + b"[" * 100_000 + b"]" * 100_000)
    assert f"nesting deeper than {MAX_DEPTH} levels" in deep and seconds < 2
    wide, seconds = _refusal(b"a: [" + b"1, " * (MAX_NODES + 10) + b"]\n")
    assert f"more than {MAX_NODES} values" in wide and seconds < 5
    bomb, seconds = _refusal((BAD / "08_billion_laughs.yaml").read_bytes())
    assert "expands to more than" in bomb and seconds < 2


def test_errors_pickle_with_their_problems() -> None:
    import pickle

    with pytest.raises(SpecError) as info:
        load_yaml(b"a: 1\na: 2\n", "t.yaml")
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.problems == info.value.problems
