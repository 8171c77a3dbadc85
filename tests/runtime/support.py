"""Helpers of the runtime tests: start scripts as a user's shell would, and read what rank 0
reports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stratcore import testing

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
GENERATED = ROOT / "generated"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def script_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no cluster variables, the package importable."""
    env = testing.clean_environ(extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GENERATED), env.get("PYTHONPATH")]))
    return env


def start(command: list[str], **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=script_env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(
    processes: list[subprocess.Popen[str]], timeout: float = 240
) -> list[tuple[int, str, str]]:
    """Wait for every process: (exit code, stdout, stderr) of each. Kills them all after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    results = []
    for process in processes:
        try:
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            stdout, stderr = process.communicate()
            raise AssertionError(
                f"{process.args} did not finish within {timeout} s:\n{stderr[-3000:]}"
            ) from None
        results.append((process.returncode, stdout, stderr))
    return results


def python(script: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / script), *args]


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def read_result(folder: Path) -> Any:
    return json.loads((folder / "result.json").read_text(encoding="utf-8"))
