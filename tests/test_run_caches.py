"""The smaller things that make a regeneration fast, each of which can only cost time: a
project's bundle of parsed specs, the runtime facts kept across runs, the up-to-date record and
what its fingerprint covers, the garbage collector paused during a command, and black run once
over each file."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
from sgtest import (
    STRATEGY_SPEC,
    builtin_specs_project,
    make_project,
    run_cli,
)

import stratgen.factcache
from stratgen.factcache import remembered
from stratgen.fmt import LINE_LENGTH, FormatError, Formatter
from stratgen.project import Project, load_config
from stratgen.speccache import SpecCache
from stratgen.uptodate import environment, fingerprint, inputs, up_to_date

# --- the bundle of parsed specs -----------------------------------------------------------------


def _sources(root: Path, cache: Path) -> tuple[list[object], SpecCache]:
    project = Project(load_config(root), Formatter(cache=cache))
    sources = project.sources()
    return [s.spec for s in sources], project.spec_cache


def test_the_bundle_serves_every_spec_alone(tmp_path: Path) -> None:
    root = builtin_specs_project(tmp_path)
    cache = tmp_path / "cache"
    specs, first = _sources(root, cache)
    assert first.misses == len(specs) and first.bundle is not None and first.bundle.is_file()
    for entry in (cache / "specs").glob("??/*"):
        entry.unlink()  # only the bundle is left
    again, second = _sources(root, cache)
    assert second.hits == len(specs) and second.misses == 0
    assert again == specs


def _edit(root: Path, name: str) -> None:
    path = root / "specs" / name
    path.write_text(path.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")


def test_a_few_edited_specs_are_read_from_their_entries(tmp_path: Path) -> None:
    """The bundle is rewritten when an eighth of the specs are not in it, not before."""
    root = builtin_specs_project(tmp_path)
    cache = tmp_path / "cache"
    specs, first = _sources(root, cache)
    assert first.bundle is not None
    bundled = first.bundle.read_bytes()
    _edit(root, "hpu.yaml")
    _, second = _sources(root, cache)
    assert second.misses == 1 and second.hits == len(specs) - 1
    assert first.bundle.read_bytes() == bundled
    _, third = _sources(root, cache)
    assert third.misses == 0 and third.hits == len(specs)
    for name in ("cpu.yaml", "cuda.yaml", "ddp.yaml"):
        _edit(root, name)
    _sources(root, cache)
    assert first.bundle.read_bytes() != bundled
    for entry in (cache / "specs").glob("??/*"):
        entry.unlink()
    _, fourth = _sources(root, cache)
    assert fourth.misses == 0, "the rewritten bundle holds every spec, edited ones too"


def test_a_damaged_bundle_falls_back_to_the_entries(tmp_path: Path) -> None:
    root = builtin_specs_project(tmp_path)
    cache = tmp_path / "cache"
    specs, first = _sources(root, cache)
    assert first.bundle is not None
    data = first.bundle.read_bytes()
    first.bundle.write_bytes(data[:-2] + bytes([data[-2] ^ 0x55]) + data[-1:])
    again, second = _sources(root, cache)
    assert second.hits == len(specs) and again == specs


# --- comparing with the disk -------------------------------------------------------------------


def test_a_tree_tells_whether_a_file_holds_exactly_some_bytes(tmp_path: Path) -> None:
    from stratgen.files import Tree

    tree = Tree(tmp_path, ["out"], "out/.manifest")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.py").write_bytes(b"x = 1\n")
    for data in (b"x = 1\n", b"x = 1", b"x = 1\n\n", b"", b"y = 1\n"):
        assert tree.holds("out/a.py", data) == (tree.read("out/a.py") == data), data
    assert not tree.holds("out/missing.py", b"") and not tree.holds("out", b"")
    assert not tree.holds("out/a.py/below", b"")


# --- runtime facts --------------------------------------------------------------------------------


def test_facts_are_remembered_by_the_runtime_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []

    def compute() -> frozenset[str]:
        calls.append("computed")
        return frozenset({"a", "b"})

    assert remembered("question", compute) == frozenset({"a", "b"})
    assert remembered("question", compute) == frozenset({"a", "b"})
    assert len(calls) == 1
    assert remembered("another question", compute) and len(calls) == 2
    monkeypatch.setattr(stratgen.factcache, "runtime_digest", lambda: "another runtime")
    assert remembered("question", compute) and len(calls) == 3
    for entry in (tmp_path / "cache" / "facts").iterdir():
        entry.write_bytes(entry.read_bytes()[:-3])  # damaged: computed again
    assert remembered("question", compute) and len(calls) == 4


def test_no_cache_folder_computes_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", "")
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert [remembered("question", compute) for _ in range(2)] == [1, 2]


# --- the up-to-date record ------------------------------------------------------------------------


def _copy_of(package: str, into: Path) -> Path:
    """A copy of an installed package's folder (its bytecode left out)."""
    found = importlib.util.find_spec(package)
    assert found is not None and found.submodule_search_locations
    source = next(iter(found.submodule_search_locations))
    return Path(shutil.copytree(source, into, ignore=shutil.ignore_patterns("__pycache__")))


@pytest.mark.parametrize("package", ["stratcore", "stratgen"])
def test_the_fingerprint_covers_the_source_of(package: str, tmp_path: Path) -> None:
    """The runtime's source decides what is generated (stratgen.corefacts reads it), and so
    does stratgen's: an edit to either, where the environment finds it, is a new fingerprint."""
    assert environment()[package] == str(Path(__import__(package).__file__).parent)
    project = Project(load_config(make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})))
    recorded = inputs(project)
    recorded["environment"][package] = str(_copy_of(package, tmp_path / package))
    before = fingerprint(recorded)
    module = tmp_path / package / "__init__.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert fingerprint(recorded) != before


def test_the_fingerprint_covers_the_targets(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    before = fingerprint(inputs(Project(load_config(root))))
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write('targets = ["stratlib", "lightning"]\n')
    assert fingerprint(inputs(Project(load_config(root)))) != before


def test_the_record_holds_the_inputs_as_they_were_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec edited while ``generate`` runs (after it was read) leaves the tree stale: the
    next run must not take it as current."""
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    spec = root / "specs" / "mine.yaml"
    original = Project.sources

    def sources_then_edit(self: Project, *args: Any, **kwargs: Any) -> Any:
        found = original(self, *args, **kwargs)
        spec.write_text(STRATEGY_SPEC.replace("How hard to try.", "Edited."), encoding="utf-8")
        return found

    monkeypatch.setattr(Project, "sources", sources_then_edit)
    assert run_cli("generate", "--project", root).code == 0
    monkeypatch.setattr(Project, "sources", original)
    assert up_to_date(Project(load_config(root)), plain=False) is None
    assert run_cli("check", "--project", root).code == 1
    assert run_cli("generate", "--project", root).code == 0
    assert up_to_date(Project(load_config(root)), plain=False) is not None


# --- black, once over each file ----------------------------------------------------------------

SOURCES = ["x = [1,2,\n3]\n", "def f( a ):\n  return {'a':a}\n", "class A: pass\n"]


def test_black_once_formats_as_black_does() -> None:
    import black

    mode = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})
    formatted = Formatter(use_cache=False, whole=True).format_all([(s, "f.py") for s in SOURCES])
    assert formatted == [black.format_str(s, mode=mode) for s in SOURCES]


def test_invalid_code_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="generated code is not valid Python"):
        Formatter(use_cache=False).format_all([("def (:\n", "bad.py")])
