"""Reliability of writes under concurrency and interruption, with real processes.

The interrupted run is made observable without any test hook: the project's strategies name
a hundred large hooks files (copied into the package as they are), so the write phase lasts
long enough for the test to see the first new file appear and kill the process with SIGKILL
right then.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from stratcore.testing import watch

from tests.support.generator import STRATEGY_SPEC, make_project, run_cli, snapshot, stratgen_env

BULK_FILES = 100
BULK_BYTES = 120_000
#: Where the copies of the hooks files land.
BULK_OUT = Path("out", "minilib", "hooks")


def _bulk_spec() -> str:
    entries = "".join(f"""
  - name: bulk_{index:04d}
    class_name: Bulk{index:04d}Strategy
    base: parallel
    cluster: [lightning]
    description: Bulk strategy {index}.
    hooks: bulk/f{index:04d}.py
""" for index in range(BULK_FILES))
    return "version: 1\nstrategies:" + entries


def _bulk_project(root: Path) -> Path:
    make_project(root, {"mine.yaml": STRATEGY_SPEC, "bulk.yaml": _bulk_spec()})
    (root / "specs" / "bulk").mkdir(parents=True)
    _write_bulk(root, version=1)
    return root


def _bulk_text(version: int, index: int) -> str:
    padding = "# " + "x" * 98 + "\n"
    return f"VERSION = {version}\nINDEX = {index}\n" + padding * (BULK_BYTES // len(padding))


def _write_bulk(root: Path, version: int) -> None:
    for index in range(BULK_FILES):
        path = root / "specs" / "bulk" / f"f{index:04d}.py"
        path.write_text(_bulk_text(version, index), encoding="utf-8")


def _spawn(root: Path, *argv: str) -> watch.Job:
    return watch.Job([sys.executable, "-m", "stratgen", *argv], cwd=root, env=stratgen_env())


def _finished(run: watch.Job) -> tuple[str, str]:
    done = run.finish()
    return done.stdout, done.stderr


def _bulk_versions(root: Path) -> dict[int, int]:
    """How many generated bulk files hold each version's content (never anything else)."""
    counts: dict[int, int] = {}
    folder = root / BULK_OUT
    for index in range(BULK_FILES):
        text = (folder / f"f{index:04d}.py").read_text(encoding="utf-8")
        body = text.split("\n", 2)[2]  # below the two header lines
        versions = [v for v in (1, 2) if body == _bulk_text(v, index)]
        assert versions, f"f{index:04d}.py is neither the old nor the new file"
        counts[versions[0]] = counts.get(versions[0], 0) + 1
    return counts


def test_concurrent_generates_leave_a_consistent_tree(tmp_path: Path) -> None:
    root = _bulk_project(tmp_path / "project")
    runs = [_spawn(root, "generate") for _ in range(2)]
    results = [_finished(run) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.process.returncode == 0, err
    # Both planned the same tree; the second to take the lock found nothing to write.
    written = sorted(int(out.strip().splitlines()[-1].split()[0]) for out, _ in results)
    assert written[0] == 0 and written[1] > BULK_FILES
    assert run_cli("check", "--project", root).code == 0
    assert not [p for p in (root / "out").rglob("*.tmp")]


def test_concurrent_generates_of_different_specs_end_in_one_of_them(tmp_path: Path) -> None:
    root = _bulk_project(tmp_path / "project")
    assert run_cli("generate", "--project", root).code == 0
    _write_bulk(root, version=2)
    runs = [_spawn(root, "generate") for _ in range(2)]
    for run in runs:
        _, err = _finished(run)
        assert run.process.returncode == 0, err
    assert _bulk_versions(root) == {2: BULK_FILES}
    assert run_cli("check", "--project", root).code == 0


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_a_killed_generate_leaves_whole_files_that_check_reports_and_generate_repairs(
    tmp_path: Path,
) -> None:
    root = _bulk_project(tmp_path / "project")
    assert run_cli("generate", "--project", root).code == 0
    _write_bulk(root, version=2)

    first = root / BULK_OUT / "f0000.py"
    run = _spawn(root, "generate")
    while b"VERSION = 2" not in first.read_bytes():
        assert run.process.poll() is None, "generate finished before it could be interrupted"
        run.check("generate to write its first new file")
        time.sleep(0.002)
    os.kill(run.process.pid, signal.SIGKILL)
    run.finish()
    assert run.process.returncode == -signal.SIGKILL

    counts = _bulk_versions(root)
    assert counts.get(1) and counts.get(2), f"not interrupted midway: {counts}"

    check = run_cli("check", "--quiet", "--project", root)
    assert check.code == 1
    stale = [(BULK_OUT / f"f{i:04d}.py").as_posix() for i in range(BULK_FILES)]
    reported = {line.split(": ", 1)[1] for line in check.out.splitlines() if ": " in line}
    still_old = {p for p in stale if b"VERSION = 1" in (root / p).read_bytes()}
    assert {p for p in stale if p in reported} == still_old

    repaired = run_cli("generate", "--project", root)
    assert repaired.code == 0, repaired.err
    assert _bulk_versions(root) == {2: BULK_FILES}
    assert run_cli("check", "--project", root).code == 0
    assert not [p for p in (root / "out").rglob("*.tmp")]


def test_a_file_created_by_a_killed_run_is_still_removed_later(tmp_path: Path) -> None:
    """The manifest is extended before the first write, so a file an interrupted run created
    is known as generated: a later run that no longer produces it removes it."""
    root = _bulk_project(tmp_path / "project")
    (root / "specs" / "bulk.yaml").rename(root / "bulk.saved")
    assert run_cli("generate", "--project", root).code == 0
    (root / "bulk.saved").rename(root / "specs" / "bulk.yaml")

    first = root / BULK_OUT / "f0000.py"
    run = _spawn(root, "generate")
    while not first.exists():
        assert run.process.poll() is None, "generate finished before it could be interrupted"
        run.check("generate to create its first file")
        time.sleep(0.002)
    os.kill(run.process.pid, signal.SIGKILL)
    run.finish()
    created = sorted(p.name for p in first.parent.glob("f*.py"))
    assert 0 < len(created) < BULK_FILES

    # The bulk strategies go away again: every file the killed run created is removed.
    (root / "specs" / "bulk.yaml").rename(root / "bulk.gone")
    result = run_cli("generate", "--project", root)
    assert result.code == 0
    assert not first.parent.exists()
    assert "warning" not in result.err
    assert run_cli("check", "--project", root).code == 0
    assert not snapshot(root / "out").keys() & {f"minilib/hooks/{n}" for n in created}
