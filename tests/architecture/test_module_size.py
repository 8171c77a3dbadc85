"""No hand-written module grows past 450 lines (the generated tests, tables of cases, may):
a module that long holds more than one idea, and the next maintainer reads it whole."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 450


def test_no_module_over_the_limit() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(tracked) > 100, "git ls-files found too few modules; is this a checkout?"
    too_long = {
        name: length
        for name in tracked
        if not name.startswith("generated/tests/")
        and (length := len((REPO / name).read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines (split them by idea): {too_long}"
