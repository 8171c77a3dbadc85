"""The render memo: ``generate`` takes a file an earlier run made from the same inputs from it,
and the result is always what a run without it gives.

Every case edits one input of a generated project (a spec, a spec other files' entries inherit
from, a template, a hooks file, the set of specs), regenerates with the memo warm, and compares
the tree with a plan made without the memo. Each also checks that the memo served files and
missed the ones the edit changed, so that a memo left unused, or keyed on too little, fails.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sgtest import REPO, run_cli, snapshot, stratgen_env
from stratcore import watch

from stratgen.files import digest
from stratgen.fmt import Formatter
from stratgen.project import Project, load_config
from stratgen.rendermemo import inputs_digest
from stratgen.speccache import unwrap, wrap

MEMO = re.compile(r"render memo: (\d+) hits, (\d+) misses")
LAYOUT = b"stratgen-render-memo-v2"
MODULE = "generated/stratlib/strategies/hpu_parallel.py"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A project whose specs and templates are copies of the built-in ones, for both targets,
    generated once: the project and the cache that run filled."""
    folder = tmp_path_factory.mktemp("memo")
    root = folder / "project"
    shutil.copytree(REPO / "specs", root / "specs")
    shutil.copytree(REPO / "templates", root / "templates")
    (root / "pyproject.toml").write_text(
        '[tool.stratgen]\nbuiltin-specs = false\ntemplates = "templates"\n'
        'targets = ["stratlib", "lightning"]\n',
        encoding="utf-8",
    )
    cache = folder / "cache"
    _generate(root, cache)
    return root, cache


@pytest.fixture
def project(generated: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the generated project, generated once where it is (the memo is the
    project folder's own), every cache warm (``STRATGEN_CACHE_DIR``)."""
    root = tmp_path / "project"
    shutil.copytree(generated[0], root)
    shutil.copytree(generated[1], tmp_path / "cache")
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    _generate(root)
    return root


def _generate(root: Path, cache: Path | None = None) -> tuple[int, int]:
    """``stratgen generate``; the render memo's hits and misses."""
    previous = os.environ.get("STRATGEN_CACHE_DIR")
    if cache is not None:
        os.environ["STRATGEN_CACHE_DIR"] = str(cache)
    try:
        result = run_cli("generate", "--project", root, "--timings")
    finally:
        if cache is not None:
            if previous is None:
                del os.environ["STRATGEN_CACHE_DIR"]
            else:
                os.environ["STRATGEN_CACHE_DIR"] = previous
    assert result.code == 0, result.err
    found = MEMO.search(result.err)
    assert found, result.err
    return int(found[1]), int(found[2])


def _without_memo(root: Path) -> dict[str, bytes]:
    """What the project's specs produce, planned with the caches ``check`` trusts (parsed
    specs, black's output by content) and without the render memo."""
    plan = Project(load_config(root), Formatter()).plan()
    return {path.removeprefix("generated/"): data for path, data in plan.files.items()}


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _edit_description(root: Path) -> None:
    _replace(root / "specs" / "hpu.yaml", "multiple HPU devices.", "multiple HPU devices (edited).")


def _edit_inherited_option(root: Path) -> None:
    """The default of an option of ddp (specs/ddp.yaml), which hpu_parallel (specs/hpu.yaml)
    inherits: ddp's constructor and the options the tests expect change."""
    _replace(
        root / "specs" / "ddp.yaml",
        "bucket_cap_mb:\n        doc: Size of the gradient buckets",
        "bucket_cap_mb:\n        default: 25.0\n        doc: Size of the gradient buckets",
    )


def _rename_parent(root: Path) -> None:
    """ddp's class, which hpu_parallel's derives from: only the parent entry changes."""
    _replace(root / "specs" / "ddp.yaml", "class_name: DDPStrategy\n", "class_name: DDPBase\n")


def _edit_template(root: Path) -> None:
    _replace(
        root / "templates" / "package" / "module.py.j2",
        "{{ header }}\n",
        "{{ header }}\n# A line the project's template adds.\n",
    )


def _edit_test_template(root: Path) -> None:
    path = root / "templates" / "tests" / "test_spec.py.j2"
    path.write_text(
        path.read_text(encoding="utf-8") + "\n\n# A line the project's template adds.\n",
        encoding="utf-8",
    )


def _edit_hooks(root: Path) -> None:
    path = root / "specs" / "hooks" / "ipu.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n# Edited.\n", encoding="utf-8")


def _remove_spec(root: Path) -> None:
    (root / "specs" / "bagua.yaml").unlink()


def _add_spec(root: Path) -> None:
    text = (root / "specs" / "hpu.yaml").read_text(encoding="utf-8")
    for old, new in (("hccl", "ccl9"), ("HABANA_VISIBLE", "DEV9_VISIBLE"), ("HPU", "Dev9")):
        text = text.replace(old, new)
    (root / "specs" / "dev9.yaml").write_text(text.replace("hpu", "dev9"), encoding="utf-8")


EDITS: dict[str, tuple[Callable[[Path], None], str, bool]] = {
    # edit: (how, a file it must change, whether remembered files change)
    "description": (_edit_description, MODULE, True),
    "inherited option": (_edit_inherited_option, "generated/stratlib/strategies/ddp.py", True),
    "parent renamed": (_rename_parent, MODULE, True),
    "module template": (_edit_template, MODULE, True),
    "test template": (_edit_test_template, "generated/tests/test_hpu.py", True),
    # Hooks files are copied, never remembered.
    "hooks file": (_edit_hooks, "generated/stratlib/hooks/ipu.py", False),
    "spec removed": (_remove_spec, "generated/stratlib/registry.py", False),
    # A new accelerator: every strategy that runs on any accelerator changes.
    "spec added": (_add_spec, "generated/stratlib/registry.py", True),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_regeneration_gives_what_a_run_without_the_memo_gives(project: Path, edit: str) -> None:
    how, changed, remembered = EDITS[edit]
    before = snapshot(project / "generated")
    how(project)
    hits, misses = _generate(project)
    after = snapshot(project / "generated")
    assert after == _without_memo(project)
    changed = changed.removeprefix("generated/")
    assert before.get(changed) != after.get(changed)
    assert (misses > 0) == remembered, "the edit changed no remembered file, or one it should not"
    if edit in ("description", "inherited option", "hooks file", "spec removed"):
        assert hits > 3 * misses, "the memo served next to nothing"


def test_an_unchanged_project_is_served_by_the_memo(project: Path) -> None:
    before = snapshot(project / "generated")
    shutil.rmtree(project / "generated")
    hits, misses = _generate(project)
    assert misses == 0 and hits > 50
    assert snapshot(project / "generated") == before


def test_a_hand_edited_file_is_restored_and_check_sees_it(project: Path) -> None:
    target = project / MODULE
    original = target.read_bytes()
    target.write_bytes(original.replace(b'"""', b'"""Edited by hand. ', 1))
    check = run_cli("check", "--project", project)
    assert check.code == 1 and f"changed: {MODULE}" in check.out
    hits, misses = _generate(project)
    assert misses == 0 and hits > 50
    assert target.read_bytes() == original
    assert run_cli("check", "--project", project).code == 0


def _memo_file(root: Path) -> Path:
    name = Project(load_config(root)).cache_name()
    return Path(os.environ["STRATGEN_CACHE_DIR"]) / "render" / name


def test_check_never_trusts_the_memo(project: Path) -> None:
    """A memo that lies (here, tampered with) misleads ``generate``, never ``check``'s own
    rendering. (Its fast path trusts a record that ``generate`` leaves, as it trusts black's
    cache: the record is removed here, as a machine that never ran stratgen has none.)"""
    import pickle

    memo = _memo_file(project)
    data = memo.read_bytes()
    name = memo.name
    payload = unwrap(data, name, LAYOUT)
    assert payload is not None
    table = pickle.loads(payload)
    lied = 0
    for key, (path, content, formatted_from, _) in table.items():
        if path == MODULE:
            stale = content + b"# stale\n"
            table[key] = (path, stale, formatted_from, digest(stale))
            lied += 1
    assert lied == 1
    memo.write_bytes(wrap(pickle.dumps(table), name, LAYOUT))
    (project / MODULE).unlink()
    _generate(project)
    assert (project / MODULE).read_bytes().endswith(b"# stale\n")
    shutil.rmtree(Path(os.environ["STRATGEN_CACHE_DIR"]) / "up-to-date")
    check = run_cli("check", "--project", project)
    assert check.code == 1 and f"changed: {MODULE}" in check.out


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "flipped byte"])
def test_a_damaged_memo_is_ignored(project: Path, damage: str) -> None:
    memo = _memo_file(project)
    data = memo.read_bytes()
    memo.write_bytes(
        {
            "empty": b"",
            "truncated": data[: len(data) // 2],
            "garbage": b"\x80\x05not a memo",
            "flipped byte": data[:-2] + bytes([data[-2] ^ 0x55]) + data[-1:],
        }[damage]
    )
    _edit_description(project)
    hits, misses = _generate(project)
    assert hits == 0 and misses > 50
    assert snapshot(project / "generated") == _without_memo(project)


def test_the_inputs_every_file_shares_are_in_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stratgen's code, the runtime's source, black's version, the templates, the settings."""
    import stratgen.factcache
    import stratgen.fmt
    import stratgen.rendermemo
    import stratgen.speccache

    templates = tmp_path / "templates"
    shutil.copytree(REPO / "templates", templates)
    digests = {inputs_digest([templates], ["package=a"])}

    def differs() -> None:
        digest = inputs_digest([templates], ["package=a"])
        assert digest not in digests
        digests.add(digest)

    _replace(templates / "package" / "module.py.j2", "{{ header }}", "{{ header }} ")
    differs()
    (templates / "tests" / "extra.j2").write_text("", encoding="utf-8")
    differs()
    monkeypatch.setattr(stratgen.speccache, "_VERSION", "other code")
    differs()
    monkeypatch.setattr(stratgen.factcache, "runtime_digest", lambda: "other runtime")
    differs()
    monkeypatch.setattr(stratgen.fmt, "black_mode", lambda: "other black")
    differs()
    assert inputs_digest([templates], ["package=b"]) not in digests


def test_keys_do_not_depend_on_the_hash_seed(generated: tuple[Path, Path], tmp_path: Path) -> None:
    """Two interpreters with other string hashes find each other's files in the memo."""
    root = tmp_path / "project"
    shutil.copytree(generated[0], root)
    cache = tmp_path / "cache"
    shutil.copytree(generated[1], cache)
    counts = []
    for seed in ("1", "2"):
        shutil.rmtree(root / "generated")
        completed = watch.run(
            [sys.executable, "-m", "stratgen", "generate", "--timings"],
            cwd=root,
            env=stratgen_env(PYTHONHASHSEED=seed, STRATGEN_CACHE_DIR=str(cache)),
        )
        assert completed.returncode == 0, completed.stderr
        found = MEMO.search(completed.stderr)
        assert found, completed.stderr
        counts.append((int(found[1]), int(found[2])))
    assert counts[1] == (sum(counts[0]), 0) and counts[1][0] > 50


def test_only_generate_uses_the_memo(project: Path) -> None:
    cache = Path(os.environ["STRATGEN_CACHE_DIR"])
    shutil.rmtree(cache / "render")
    assert run_cli("check", "--project", project).code == 0
    _edit_description(project)
    assert run_cli("check", "--project", project).code == 1
    assert not (cache / "render").exists()


def test_a_few_new_entries_are_kept_beside_the_memo(project: Path) -> None:
    """After an edit to one spec, the new entries go to a small file of their own; the memo
    is rewritten once an eighth of what a run uses is not in it."""
    memo = _memo_file(project)
    recent = memo.with_name(memo.name + ".recent")
    written = memo.read_bytes()
    # Two files change (the accelerator's module and its tests): 2 new entries, 2 unused.
    _replace(project / "specs" / "mps.yaml", "(Metal Performance Shaders)", "(Metal)")
    _generate(project)
    assert memo.read_bytes() == written and recent.is_file()
    shutil.rmtree(project / "generated")
    hits, misses = _generate(project)
    assert misses == 0
    recent.write_bytes(recent.read_bytes()[:-1])  # damaged: only its entries are made anew
    shutil.rmtree(project / "generated")
    hits, misses = _generate(project)
    assert 0 < misses < hits
    assert snapshot(project / "generated") == _without_memo(project)
    _edit_template(project)
    _generate(project)
    assert memo.read_bytes() != written and not recent.exists()


class _Recording(dict[str, Any]):
    """A catalog table that notes every name read from it ("*": all of them)."""

    def __init__(self, table: dict[str, Any], log: set[tuple[str, str]], name: str) -> None:
        super().__init__(table)
        self.log, self.name = log, name

    def __getitem__(self, key: str) -> Any:
        self.log.add((self.name, key))
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.log.add((self.name, key))
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.log.add((self.name, str(key)))
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self.log.add((self.name, "*"))
        return super().__iter__()

    def keys(self) -> Any:
        self.log.add((self.name, "*"))
        return super().keys()

    def values(self) -> Any:
        self.log.add((self.name, "*"))
        return super().values()

    def items(self) -> Any:
        self.log.add((self.name, "*"))
        return super().items()


def test_a_test_module_reads_of_the_catalog_only_what_its_key_holds() -> None:
    """The memo keeps a generated test module under the entries it tests, the accelerators its
    strategies run on and every precision plugin (``render._test_module``): rendering it must
    read nothing else of the catalog."""
    import dataclasses

    from stratgen import render
    from stratgen.project import resource_dir
    from stratgen.resolve import resolve
    from stratgen.selection import select

    project = Project(load_config(REPO))
    catalog = resolve(project.sources())
    selection = select(catalog)
    template = render.Renderer([resource_dir("templates")]).template("tests/test_spec.py.j2")
    chosen = {
        "strategies": set(selection.strategies),
        "accelerator": set(selection.accelerators),
        "precision_plugins": set(selection.precision_plugins),
        "cluster_environments": set(selection.environments),
    }
    tables = (
        "backends",
        "backend_sources",
        "accelerators",
        "strategies",
        "precision_plugins",
        "environments",
    )
    rendered = 0
    for source in catalog.sources:
        log: set[tuple[str, str]] = set()
        recording = dataclasses.replace(
            catalog, **{t: _Recording(getattr(catalog, t), log, t) for t in tables}
        )
        item = render._test_module(
            template, recording, selection, chosen, source, "stratlib", "tests", None
        )
        spec = source.spec
        allowed = {("strategies", s.name) for s in spec.strategies}
        allowed |= {("environments", e.name) for e in spec.cluster_environments}
        allowed |= {("precision_plugins", p.name) for p in spec.precision_plugins}
        allowed |= {("precision_plugins", "*")}
        if spec.accelerator is not None:
            allowed.add(("accelerators", spec.accelerator.name))
        for strategy in spec.strategies:
            allowed |= {("accelerators", n) for n in catalog.strategies[strategy.name].accelerators}
        assert log <= allowed, f"{source.path}: read {sorted(log - allowed)}"
        rendered += item is not None
    assert rendered > 10
