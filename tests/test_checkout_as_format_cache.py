"""A checkout's generated files are the format cache of its next ``generate``.

On a machine that never ran stratgen (CI on a fresh clone), regenerating an up-to-date tree
must not run black: the manifest records, for every formatted file, the formatter's key of
the text it was formatted from, and a file still on disk as recorded is its own formatting.
Anything edited, or formatted from other text (another black version, another render), is
formatted anew; ``check`` never takes this shortcut.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stratgen.files import LOCK_NAME, digest
from stratgen.fmt import Formatter
from stratgen.project import Project, load_config

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "generated/.stratgen-manifest.json"
EDITED = "generated/stratlib/strategies/ddp.py"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fresh clone, as far as stratgen can tell: specs, configuration, generated files."""
    root = tmp_path / "clone"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for folder in ("specs", "generated"):
        shutil.copytree(
            ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return root


def _contents(folder: Path) -> dict[Path, bytes]:
    """Every file under ``folder`` but the lock a run leaves (empty, and not generated)."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != LOCK_NAME}


def _generate(root: Path, cache: Path) -> tuple[Project, list[str]]:
    project = Project(load_config(root), Formatter(cache=cache))
    report = project.generate(project.plan(trust_tree=True))
    return project, report.written


def test_an_up_to_date_checkout_regenerates_without_formatting(
    checkout: Path, tmp_path: Path
) -> None:
    before = _contents(checkout / "generated")
    project, written = _generate(checkout, tmp_path / "empty-cache")
    assert written == []
    assert project.formatter.misses == 0 and project.formatter.hits > 50
    assert _contents(checkout / "generated") == before


def test_an_edited_file_is_formatted_anew_and_restored(checkout: Path, tmp_path: Path) -> None:
    target = checkout / EDITED
    original = target.read_bytes()
    target.write_bytes(original.replace(b'"""', b'"""Edited. ', 1))
    project, written = _generate(checkout, tmp_path / "empty-cache")
    assert EDITED in written and set(written) <= {EDITED, MANIFEST}
    assert project.formatter.misses == 1
    assert target.read_bytes() == original
    assert (checkout / MANIFEST).read_bytes() == (ROOT / MANIFEST).read_bytes()


def test_a_file_formatted_from_other_text_is_formatted_anew(checkout: Path, tmp_path: Path) -> None:
    """A recorded key that no longer matches (black upgraded, say) is not trusted."""
    manifest = checkout / MANIFEST
    document = json.loads(manifest.read_text(encoding="utf-8"))
    document["formatted_from"][EDITED] = "0" * 64
    manifest.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    project, written = _generate(checkout, tmp_path / "empty-cache")
    assert project.formatter.misses == 1
    assert written == [MANIFEST]
    assert manifest.read_bytes() == (ROOT / MANIFEST).read_bytes()


def test_check_formats_everything_itself(checkout: Path, tmp_path: Path) -> None:
    """A generated file edited by hand together with its manifest entry is still drift."""
    target = checkout / EDITED
    edited = target.read_bytes().replace(b'"""', b'"""Edited. ', 1)
    target.write_bytes(edited)
    manifest = checkout / MANIFEST
    document = json.loads(manifest.read_text(encoding="utf-8"))
    document["files"][EDITED] = digest(edited)
    manifest.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    project = Project(load_config(checkout), Formatter(cache=tmp_path / "cache"))
    drift = project.compare(project.plan(), with_diff=False)
    assert EDITED in drift.changed
    assert project.formatter.misses > 50
