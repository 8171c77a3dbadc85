"""Helpers of the runtime tests: start scripts as a user's shell would, and read what rank 0
reports."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratcore import testing
from stratcore.testing import watch
from stratcore.testing.processes import run_given_a_port

from tests.support import REPO

ROOT = REPO
SCRIPTS = Path(__file__).resolve().parent / "scripts"
GENERATED = ROOT / "generated"


def script_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no cluster variables, the package importable."""
    env = testing.clean_environ(extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GENERATED), env.get("PYTHONPATH")]))
    return env


def start(command: list[str], **extra: str) -> watch.Job:
    """``command`` running in a user's shell environment, watched for progress."""
    what = " ".join(Path(part).name for part in command[1:3])
    return watch.Job(command, what=what, env=script_env(**extra))


def finish(jobs: list[watch.Job]) -> list[tuple[int, str, str]]:
    """Wait for every job (``watch.finish_all``): (exit code, stdout, stderr) of each."""
    return [(done.returncode, done.stdout, done.stderr) for done in watch.finish_all(jobs)]


def finish_on_a_free_port(start: Callable[[str], list[watch.Job]]) -> list[tuple[int, str, str]]:
    """Run jobs given a port (``testing.processes.run_given_a_port``): as ``finish``."""
    done = run_given_a_port(start)
    return [(run.returncode, run.stdout, run.stderr) for run in done]


def python(script: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / script), *args]


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def read_result(folder: Path) -> Any:
    return json.loads((folder / "result.json").read_text(encoding="utf-8"))
