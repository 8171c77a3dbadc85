"""Fuzzing the generator with hypothesis: random bytes, truncated and mutated specs, and
structurally mutated documents. Whatever the input, `stratgen validate` and `generate` end
with exit 0 or 2 and a message, never an exception; each run takes at most a few seconds; and
a failed `generate` leaves the tree exactly as it was, a successful one leaves it consistent.

Runs are in-process through stratgen.cli.main with captured streams, so any exception other
than the SystemExit of argument parsing fails the test with its traceback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.generator import FIXTURES, STRATEGY_SPEC, make_project, run_cli, snapshot

SEEDS = [
    STRATEGY_SPEC.encode(),
    (FIXTURES / "golden" / "minimal" / "specs" / "local.yaml").read_bytes(),
    (FIXTURES / "golden" / "hostile" / "specs" / "hostile.yaml").read_bytes(),
]
YAML_BYTES = [*b":-[]{}&*!|>'\"#%@`,?\t\n \\", 0x00, 0x80, 0xC3, 0xE9, 0xFF]
#: CPU seconds one command may take on any input (a command takes a fraction of a second): the
#: CPU time of this process, which other processes' load does not move as it moves the clock.
MAX_CPU_SECONDS = 5.0


@st.composite
def mutated(draw: Any) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "duplicate"]))
        byte = draw(st.sampled_from(YAML_BYTES) | st.integers(0, 255))
        if action == "replace" and position < len(data):
            data[position] = byte
        elif action == "insert":
            data.insert(position, byte)
        elif action == "delete" and position < len(data):
            del data[position]
        elif action == "duplicate":
            end = draw(st.integers(position, min(len(data), position + 80)))
            data[position:position] = data[position:end]
    return bytes(data)


@st.composite
def truncated(draw: Any) -> bytes:
    data = draw(st.sampled_from(SEEDS))
    return data[: draw(st.integers(0, len(data)))]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


@st.composite
def restructured(draw: Any) -> bytes:
    """A valid document with one value somewhere replaced by arbitrary data."""
    document = yaml.safe_load(draw(st.sampled_from(SEEDS[:2])))
    node: Any = document
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, dict | list) and child and draw(st.booleans()):
            node = child
            continue
        node[key] = draw(json_values)
        break
    return json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")


inputs = st.one_of(st.binary(max_size=3000), truncated(), mutated(), restructured())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(tmp_path_factory.mktemp("fuzz") / "project")
    assert run_cli("generate", "--project", root).code == 0
    return root


def _run(*argv: str | Path) -> Any:
    started = time.process_time()
    result = run_cli(*argv)
    cpu = time.process_time() - started
    assert cpu < MAX_CPU_SECONDS, f"took {cpu:.1f} CPU seconds"
    assert result.code in (0, 2), result
    assert "Traceback" not in result.err
    if result.code == 2:
        assert result.err.startswith("error: ")
    return result


@settings(max_examples=150)
@given(data=inputs)
def test_validate_never_crashes(project: Path, data: bytes) -> None:
    spec = project / "fuzz.yaml"  # outside specs/: validated as a file added to the project
    spec.write_bytes(data)
    _run("validate", "--project", project, spec)


@settings(max_examples=40)
@given(data=inputs)
def test_generate_never_crashes_nor_writes_a_partial_tree(project: Path, data: bytes) -> None:
    spec = project / "specs" / "fuzz.yaml"
    spec.write_bytes(data)
    try:
        before = snapshot(project / "out")
        result = _run("generate", "--project", project)
        if result.code == 2:
            assert snapshot(project / "out") == before
        else:
            assert _run("check", "--project", project).code == 0
    finally:
        spec.unlink()
