"""The benchmark harness runs end to end and reports every row.

This is not a timed test: ``--quick`` measures too briefly for the figures to mean anything.
It checks that every benchmark ran (a failing one prints a FAILED row and exits 1), that
every expected row is printed and written to the Markdown file, and that each row carries a
figure, a baseline and a ratio.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from stratcore.testing import watch

ROOT = Path(__file__).resolve().parents[2]
#: One worker runs both tests, so that the quick run (the module's fixture) runs once.
pytestmark = pytest.mark.xdist_group("quick-benchmark-run")

EXPECTED_ROWS = [
    "step time: ddp",
    "step time: ddp_spawn",
    "launch to first step: ddp",
    "launch to first step: ddp_spawn",
    "step time: model_parallel 2x2",
    "step time: fsdp HYBRID_SHARD 2x2",
    "step time: model_parallel pp 2 x dp 2",
    "import stratlib (CPU)",
    "stratgen generate, no output, empty cache",
    "stratgen check, up to date",
    "stratgen check, up to date, empty cache (a fresh machine, as in CI)",
    "stratgen generate, nothing changed",
    "cache: compiled templates (check, up to date)",
    # The larger project: a few more specs in a quick run (the number is the benchmark's).
    "stratgen generate, N more specs, no output, empty cache",
    "stratgen generate, N more specs, one edited",
    "cache: black's layouts (one of N more specs edited)",
    "cache: black's layouts (check after an edit to one of N more specs)",
    "checkpoint save (atomic)",
    "checkpoint load",
    "async checkpoint save, time to return",
]


def _lightning_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("lightning") is not None


def _pattern(name: str) -> str:
    """A row name as a regular expression: ``N`` stands for a number."""
    return re.escape(name).replace(r"\ N\ ", r"\ \d+\ ")


@pytest.fixture(scope="module")
def quick_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    markdown = tmp_path_factory.mktemp("bench") / "table.md"
    env = dict(os.environ)
    # The checkout's `benchmarks` package must win over any installed one of the same name.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    completed = watch.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--markdown", str(markdown)],
        what="python -m benchmarks --quick",
        cwd=ROOT,
        env=env,
    )
    return completed, markdown


@pytest.mark.slow
def test_quick_run_prints_every_row(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    completed, _ = quick_run
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "FAILED" not in completed.stdout
    expected = EXPECTED_ROWS + (
        ["step time: Fabric ddp", "launch to first step: Fabric ddp"]
        if _lightning_installed()
        else []
    )
    lines = completed.stdout.splitlines()
    for name in expected:
        matching = [line for line in lines if re.match(_pattern(name) + "  ", line)]
        assert len(matching) == 1, f"row {name!r} missing from:\n{completed.stdout}"
        # A figure with its unit, then a baseline figure, then a numeric ratio.
        assert re.search(
            r"\d[\d.]* (s|ms|MB/s) +\d[\d.]* (s|ms|MB/s) .+? +\d+\.\d{3}( \[[\d.]+-[\d.]+\])? ",
            matching[0],
        ), matching[0]
    assert "Machine: cpu: " in completed.stdout and "torch: " in completed.stdout
    # The cold generation it times must produce this checkout's generated/, every target's
    # files included.
    assert "identical to this checkout's generated/: yes" in completed.stdout, completed.stdout


@pytest.mark.slow
def test_quick_run_writes_the_markdown_table(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    completed, markdown = quick_run
    assert completed.returncode == 0, completed.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith(
        "| benchmark | measured | baseline | ratio [min-max] | target | met? | notes |\n|---|"
    )
    table = [line for line in text.splitlines() if line.startswith("| ")]
    names = [line.split(" | ")[0].removeprefix("| ") for line in table[1:]]
    for name in EXPECTED_ROWS:
        assert any(
            re.fullmatch(_pattern(name), found) for found in names
        ), f"{name!r} not in the Markdown table"
    assert all(line.count(" | ") == 6 for line in table), "every row has 7 cells"
    assert "Machine: cpu: " in text
