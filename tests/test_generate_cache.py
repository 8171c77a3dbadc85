"""The caches that make generation fast never change what it produces.

A run with every cache empty, one that fills the caches, one that reads them back and one that
finds them corrupted all give the same bytes as a run with caching turned off, and a damaged
entry of any kind is ignored rather than reported.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from sgtest import builtin_specs_project

from stratgen.fmt import Formatter
from stratgen.project import Project, load_config
from stratgen.speccache import SpecCache, wrap


def _plan(root: Path, cache: Path | None) -> tuple[dict[str, bytes], Project]:
    formatter = Formatter(cache=cache) if cache is not None else Formatter(use_cache=False)
    project = Project(load_config(root), formatter)
    return project.plan().files, project


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = builtin_specs_project(tmp_path_factory.mktemp("cache"))
    files, project = _plan(root, None)
    assert project.spec_cache.folder is None and project.formatter.cache is None
    return root, files


@pytest.fixture(scope="module")
def filled(
    uncached: tuple[Path, dict[str, bytes]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A cache filled by one run of the project."""
    root, expected = uncached
    cache = tmp_path_factory.mktemp("filled") / "cache"
    files, project = _plan(root, cache)
    assert project.spec_cache.hits == 0 and project.formatter.hits == 0
    assert files == expected
    return cache


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".tmp-"))


def test_cached_runs_give_the_uncached_bytes(
    uncached: tuple[Path, dict[str, bytes]], filled: Path, tmp_path: Path
) -> None:
    root, expected = uncached
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    files, project = _plan(root, cache)
    assert project.spec_cache.misses == 0 and project.formatter.misses == 0
    assert project.spec_cache.hits == len(list((root / "specs").glob("*.yaml")))
    assert files == expected


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "garbage", "other key", "wrong type", "bad pickle", "flipped byte"],
)
def test_a_damaged_entry_is_ignored(
    uncached: tuple[Path, dict[str, bytes]], filled: Path, tmp_path: Path, damage: str
) -> None:
    root, expected = uncached
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    specs = _entries(cache / "specs")
    bundles = [p for p in specs if "bundles" in p.relative_to(cache).parts]
    layouts = _entries(cache / "layouts")
    assert specs and bundles and len(layouts) == 1
    # Every parsed spec and the project's bundle of them, and the project's file of black's
    # layouts (every file is formatted again).
    for entry in specs + layouts:
        data = entry.read_bytes()
        header = data[: data.index(b"\0", data.index(b"\0") + 1) + 1]
        layout, key = header.decode().split("\0")[:2]
        other = b"1" if header[-2:-1] == b"0" else b"0"  # the key's last digit, changed
        damaged = {
            "empty": b"",
            "truncated": data[: len(data) // 2],
            "garbage": b"\x80\x05not a pickle at all",
            "other key": data.replace(header, header[:-2] + other + b"\0", 1),
            # Whole, under the right key, but not a parsed spec (nor UTF-8 text).
            "wrong type": wrap(pickle.dumps({"version": 1}), key, layout.encode()),
            "bad pickle": header + b"cos\nsystem\n(S'false'\ntR.",
            "flipped byte": data[:-2] + bytes([data[-2] ^ 0x55]) + data[-1:],
        }[damage]
        entry.write_bytes(damaged)
    files, project = _plan(root, cache)
    assert files == expected
    assert project.spec_cache.hits == 0
    assert project.spec_cache.misses == len(specs) - len(bundles)
    assert project.formatter.hits == 0 and project.formatter.misses > 50


def test_no_cache_folder_stores_nothing(tmp_path: Path) -> None:
    cache = SpecCache(None)
    cache.put("ab" * 32, object())  # type: ignore[arg-type]
    assert cache.get("ab" * 32) is None


def test_an_unwritable_cache_only_costs_time(
    uncached: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root, expected = uncached
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")
    files, project = _plan(root, blocked)
    assert files == expected
    assert project.spec_cache.hits == 0


def test_an_empty_cache_setting_turns_both_caches_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", "")
    project = Project(load_config(builtin_specs_project(tmp_path)))
    assert project.formatter.cache is None and project.spec_cache.folder is None
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "here"))
    project = Project(load_config(tmp_path / "project"))
    assert project.spec_cache.folder == tmp_path / "here" / "specs"


def test_layouts_outlive_runs_that_take_files_from_the_render_memo(
    uncached: tuple[Path, dict[str, bytes]], filled: Path, tmp_path: Path
) -> None:
    """``generate`` lays out only the files the render memo does not hold, and keeps what it
    did not use: ``check``, which lays out every file, still finds each layout it needs."""
    root = tmp_path / "project"
    shutil.copytree(uncached[0], root)
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)

    def generate() -> Project:
        project = Project(load_config(root), Formatter(cache=cache))
        project.generate(project.plan(remembered=True))
        return project

    generate()  # fills the render memo
    spec = root / "specs" / "deepspeed.yaml"
    spec.write_text(
        spec.read_text(encoding="utf-8").replace(
            "install: pip install deepspeed}", "install: pip install 'deepspeed>=0.19'}"
        ),
        encoding="utf-8",
    )
    edited = generate()
    assert edited.memo is not None and edited.memo.hits > 50
    assert 0 < edited.formatter.misses < 5, "only the edited spec's files need black"
    project = Project(load_config(root), Formatter(cache=cache))
    assert project.compare(project.plan(), with_diff=False).changed == []
    assert project.formatter.misses == 0 and project.formatter.hits > 50


def test_the_layouts_file_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stratgen.fmt.MOST_LAYOUTS", 3)
    sources = [f"x{i} = {'(' + ', '.join(['1'] * 60) + ')'}\n" for i in range(5)]

    def run(items: list[str]) -> Formatter:
        formatter = Formatter(cache=tmp_path)
        formatter.open("project")
        formatter.format_all([(source, "m.py") for source in items])
        formatter.save()
        return formatter

    assert run(sources[:2]).misses == 2
    assert run(sources[2:]).misses == 3  # five in all: more than three, so only these kept
    assert run(sources[:2]).misses == 2
    assert run(sources[:2]).misses == 0
