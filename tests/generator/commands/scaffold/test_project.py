"""A user's project after `stratgen init` and `stratgen generate`: its package stands alone
(torch only), trains for real, and its generated tests pass."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
from stratcore.testing import watch

from tests.support.user_projects import PACKAGE, ROOT

#: What the generated package must run without: stratgen and what stratgen uses.
BLOCKED = ("stratgen", "jinja2", "yaml", "black", "copier")

# Makes the blocked modules unimportable in the process that runs it.
BLOCKER = textwrap.dedent(f"""
    import sys

    BLOCKED = {BLOCKED!r}


    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ImportError(f"{{name}} is blocked: the generated package must not need it")
            return None


    sys.meta_path.insert(0, Blocker())
    """)

# Runs examples/train.py's main behind the blocker. Ranks that the strategy starts again run
# this same script, so they are blocked too.
RUNNER = BLOCKER + textwrap.dedent(f"""
    sys.path.insert(0, {str(ROOT / "examples")!r})
    from train import main

    code = main()
    leaked = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    if leaked:
        sys.exit(f"imported anyway: {{leaked}}")
    print("blocked modules stayed out:", ", ".join(BLOCKED))
    sys.exit(code)
    """)


def clean_env(project: Path) -> dict[str, str]:
    """Only the project's src/ on the path: not stratgen, not stratlib."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MASTER_", "LOCAL_RANK", "WORLD_SIZE"))
    }
    env["PYTHONPATH"] = str(project / "src")
    return env


def test_the_blocker_blocks() -> None:
    probe = watch.run([sys.executable, "-c", BLOCKER + "import yaml"])
    assert probe.returncode != 0
    assert "yaml is blocked" in probe.stderr


@pytest.mark.slow
def test_generated_package_trains_without_stratgen(shared_project: Path, tmp_path: Path) -> None:
    pytest.importorskip("sklearn", reason="the example's data set ships with scikit-learn")
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    result = watch.run(
        [
            sys.executable,
            str(runner),
            "--package",
            PACKAGE,
            "--strategy",
            "toy_ddp",
            "--accelerator",
            "toy",
            "--devices",
            "2",
            "--epochs",
            "2",
            "--checkpoint",
            str(tmp_path / "toy.ckpt"),
        ],
        cwd=tmp_path,
        env=clean_env(shared_project),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "blocked modules stayed out" in result.stdout
    accuracy = float(re.findall(r"^epoch 2/2: .* val accuracy ([0-9.]+)", result.stdout, re.M)[0])
    assert accuracy > 0.8, result.stdout


@pytest.mark.slow
def test_generated_tests_of_the_project_pass(shared_project: Path) -> None:
    # The tests of the project's own spec; the others repeat stratlib's tests under its name.
    result = watch.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/generated/test_toy.py",
        ],
        cwd=shared_project,
        env=clean_env(shared_project),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", result.stdout)
    assert "failed" not in result.stdout.splitlines()[-1]


@pytest.mark.slow
def test_generated_package_passes_mypy(shared_project: Path) -> None:
    pytest.importorskip("mypy")
    result = watch.run(
        [sys.executable, "-m", "mypy", "--no-incremental"],
        cwd=shared_project,
        env=clean_env(shared_project),
    )
    assert result.returncode == 0, result.stdout[-6000:]
