"""The first process of a Lightning plugin's test job starts under ``STRATLIB_RANK_PREFIX``, as
the first rank of a stratlib job does (``Launcher.job_command``); Lightning's own launcher
starts the others."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from stratcore.launchers.base import RANK_PREFIX_ENV  # noqa: E402
from stratcore.testing.lightning import runner as testing  # noqa: E402

from stratlib.lightning import pytorch  # noqa: E402
from tests.support import REPO

PREFIX = REPO / "tests" / "runtime" / "scripts" / "rank_prefix.py"


def test_a_lightning_job_starts_under_the_rank_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RANK_PREFIX_ENV, shlex.join([sys.executable, str(PREFIX)]))
    monkeypatch.setenv("PREFIX_LOG", str(tmp_path / "prefix.log"))
    folder = tmp_path / "case"
    folder.mkdir()
    plugin = pytorch.ModelParallelStrategy
    package = plugin.__module__.rsplit(".", 1)[0]  # where the plugins register themselves
    case = testing.training_case("pytorch", package, plugin, folder, devices=2, steps=1)
    done = testing.run_cases([case])
    assert done.returncode == 0, done.stderr[-3000:]
    # Both ranks trained; only the first started under the prefix.
    assert testing.read_reports(case) is not None, done.stdout[-3000:]
    [logged] = (tmp_path / "prefix.log").read_text(encoding="utf-8").splitlines()
    assert " -m stratcore.testing.lightning.program cases " in logged, logged
