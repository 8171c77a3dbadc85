"""The smaller things that make a regeneration fast, each of which can only cost time: a
project's bundle of parsed specs, the runtime facts kept across runs, the up-to-date record and
what its fingerprint covers, the garbage collector paused during a command, black imported in a
helper process."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path
from typing import Any

import pytest
from sgtest import (
    MINIMAL_BASE,
    STRATEGY_SPEC,
    builtin_specs_project,
    make_project,
    run_cli,
)

import stratgen.blackhelper
import stratgen.factcache
from stratgen.blackhelper import BlackHelper
from stratgen.factcache import remembered
from stratgen.fmt import LINE_LENGTH, FormatError, Formatter, _black_version
from stratgen.project import Project, load_config
from stratgen.speccache import SpecCache
from stratgen.uptodate import fingerprint, up_to_date

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


def test_the_fingerprint_covers_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's source decides what is generated (stratgen.corefacts reads it)."""
    runtime = tmp_path / "stratcore"
    shutil.copytree(
        stratgen.factcache.runtime_dir(), runtime, ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.setattr(stratgen.factcache, "runtime_dir", lambda: runtime)
    digest = stratgen.factcache.runtime_digest
    project = Project(load_config(make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})))
    try:
        digest.cache_clear()  # read once per process: a new process, as far as it knows
        before = fingerprint(project)
        strategy = runtime / "strategy.py"
        strategy.write_text(strategy.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        digest.cache_clear()
        assert fingerprint(project) != before
    finally:
        digest.cache_clear()


def test_the_fingerprint_covers_stratgens_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stratgen.speccache

    project = Project(load_config(make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})))
    before = fingerprint(project)
    monkeypatch.setattr(stratgen.speccache, "_VERSION", "another stratgen")
    assert fingerprint(project) != before


def test_the_fingerprint_covers_the_targets(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    before = fingerprint(Project(load_config(root)))
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write('targets = ["stratlib", "lightning"]\n')
    assert fingerprint(Project(load_config(root))) != before


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
    assert up_to_date(Project(load_config(root))) is None
    assert run_cli("check", "--project", root).code == 1
    assert run_cli("generate", "--project", root).code == 0
    assert up_to_date(Project(load_config(root))) is not None


def test_the_record_tells_changed_inputs_from_a_changed_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What generate starts black's helper early on: inputs changed since the tree was made."""
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    assert run_cli("generate", "--project", root).code == 0
    project = Project(load_config(root))
    assert up_to_date(project) is not None and not project.inputs_changed
    (root / "specs" / "base.yaml").write_text(MINIMAL_BASE + "\n# edited\n", encoding="utf-8")
    project = Project(load_config(root))
    assert up_to_date(project) is None and project.inputs_changed
    shutil.rmtree(root / "out")
    project = Project(load_config(root))
    assert up_to_date(project) is None and not project.inputs_changed


# --- black in a helper process ------------------------------------------------------------------

SOURCES = ["x = [1,2,\n3]\n", "def f( a ):\n  return {'a':a}\n", "class A: pass\n"]


@pytest.fixture
def no_black(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a process that has not imported black (``stratgen generate`` starts so), on a
    machine with an idle core."""
    monkeypatch.setattr(stratgen.blackhelper, "_black_imported", lambda: False)
    monkeypatch.setattr(stratgen.blackhelper, "_spare_core", lambda: True)


@pytest.mark.parametrize(
    ("cores", "runnable", "load", "spare"),
    [
        (2, 1, 2.5, True),  # only this process runs now, whatever ran a minute ago
        (2, 3, 0.1, False),
        (4, 3, 3.0, True),
        (1, 1, 0.0, False),
        (2, None, 0.3, True),  # no /proc/loadavg: the load average over a minute
        (2, None, 1.8, False),
    ],
)
def test_the_helper_runs_only_beside_an_idle_core(
    monkeypatch: pytest.MonkeyPatch, cores: int, runnable: int | None, load: float, spare: bool
) -> None:
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(stratgen.blackhelper, "_runnable", lambda: runnable)
    assert stratgen.blackhelper._spare_core() is spare


@pytest.mark.usefixtures("no_black")
def test_the_helper_formats_as_black_does_here() -> None:
    import black

    mode = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})
    helper = BlackHelper.start()
    if helper is None:
        pytest.skip("one core: no helper")
    try:
        texts = helper.format(SOURCES, LINE_LENGTH, _black_version())
    finally:
        helper.close()
    assert texts == [black.format_str(s, mode=mode) for s in SOURCES]


@pytest.mark.usefixtures("no_black")
def test_a_helper_that_died_leaves_formatting_here(tmp_path: Path) -> None:
    formatter = Formatter(use_cache=False)
    formatter.start_helper()
    if formatter.helper is None:
        pytest.skip("one core: no helper")
    formatter.helper._process.kill()
    assert formatter.format_all([(s, "f.py") for s in SOURCES]) == Formatter(
        use_cache=False
    ).format_all([(s, "f.py") for s in SOURCES])
    formatter.stop_helper()


@pytest.mark.usefixtures("no_black")
def test_invalid_code_is_the_same_error_with_a_helper() -> None:
    formatter = Formatter(use_cache=False)
    formatter.start_helper()
    try:
        with pytest.raises(FormatError, match="generated code is not valid Python"):
            formatter.format_all([("def (:\n", "bad.py")])
    finally:
        formatter.stop_helper()


@pytest.mark.usefixtures("no_black")
def test_another_black_version_is_not_used() -> None:
    helper = BlackHelper.start()
    if helper is None:
        pytest.skip("one core: no helper")
    try:
        assert helper.format(SOURCES, LINE_LENGTH, "0.0-not-this-one") is None
    finally:
        helper.close()


def test_generate_starts_the_helper_only_for_a_spec_it_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    started: list[bool] = []
    monkeypatch.setattr(Formatter, "start_helper", lambda self: started.append(True))
    root = make_project(tmp_path / "p", {"mine.yaml": STRATEGY_SPEC})
    assert run_cli("generate", "--project", root).code == 0
    assert started
    started.clear()
    shutil.rmtree(root / "out")  # every spec parsed before: nothing new to format
    assert run_cli("generate", "--project", root).code == 0
    assert not started
    assert run_cli("check", "--project", root).code == 0
    (root / "specs" / "base.yaml").write_text(MINIMAL_BASE + "\n# edited\n", encoding="utf-8")
    assert run_cli("check", "--project", root).code == 0
    assert not started, "check never starts it"


# --- the garbage collector ----------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_a_command_leaves_the_collector_as_it_found_it(enabled: bool, tmp_path: Path) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert run_cli("validate", "--project", tmp_path, str(tmp_path / "none.yaml")).code == 2
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
