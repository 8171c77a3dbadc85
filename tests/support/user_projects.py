"""Helpers shared by the tests of `stratgen init`, `stratgen new` and user projects."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stratcore.testing import watch

from stratgen.cli import main

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "acme_strategies"


@dataclass
class Result:
    code: int
    out: str
    err: str


def stratgen(*args: str | Path) -> Result:
    """Run the stratgen command line in this process."""
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in args], out=out, err=err)
    return Result(code, out.getvalue(), err.getvalue())


def stratgen_process(
    *args: str | Path, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m stratgen`` in a new process, without a terminal (its input is empty)."""
    return watch.run([sys.executable, "-m", "stratgen", *map(str, args)], cwd=cwd, env=source_env())


def source_env(**extra: str) -> dict[str, str]:
    """The environment with stratgen importable from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT / "generator"), env.get("PYTHONPATH", "")] if p
    )
    env.update(extra)
    return env


def init_project(target: Path, package: str = PACKAGE) -> Path:
    result = stratgen("init", target, "--defaults", "--package", package)
    assert result.code == 0, result.err
    return target


Ask = Callable[[str], str]
