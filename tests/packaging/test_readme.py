"""README.md: its two commands are what CI runs, and it stays a landing page."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_two_commands_are_the_ci_scripts() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"^bash (\.ci/\w+)", text, re.M)
    assert commands[:2] == [".ci/main", ".ci/run"]
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/setup" in run and "bash .ci/test" in run
    setup = (ROOT / ".ci" / "setup").read_text()
    # torch first, alone, then the runtime, stratlib and the generator with its extras.
    installs = 'pip_install -e runtime -e generated -e ".[$EXTRAS]"'
    assert setup.index("pip_install $TORCH_INSTALL") < setup.index(installs)
    assert 'TORCH_INSTALL="${TORCH_INSTALL:-torch==2.13.0}"' in setup
    for script in ("setup", "test", "run", "main", "horovod", "deepspeed"):
        path = ROOT / ".ci" / script
        assert os.access(path, os.X_OK), f".ci/{script} is not executable"
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr


def test_the_readme_is_a_landing_page() -> None:
    """A few hundred lines at most: what stratgen is, the two commands, a quick start, a
    spec and links into the documentation, where everything else lives."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the rest into docs/"
