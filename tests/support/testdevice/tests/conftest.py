"""Running the test device's checks in processes of their own, watched for progress.

Every check runs in fresh Python processes (testdevice_checks.py, testdevice_ranks.py): loading
the device renames PrivateUse1 for the whole process, which the pytest process must not carry into
other tests. The device is built (or found in its cache) once per session first, so no check
process builds it.
A run fails when a process fails, or when no process has printed anything for STALL_SECONDS:
a hang, told apart from a slow machine by the lack of progress rather than by the clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent  # tests/support/testdevice: importable without installing
STALL_SECONDS = 180.0
LAST_RESORT_SECONDS = 600.0
BUILD_SECONDS = 1800.0  # a cold build takes a minute or two on two busy cores

RunCheck = Callable[..., list[str]]


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def testdevice_built() -> None:
    command = [sys.executable, "-m", "stratgen_testdevice", "build"]
    try:
        result = subprocess.run(
            command,
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=BUILD_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the test device did not build in {BUILD_SECONDS:.0f} s", pytrace=False)
    if result.returncode != 0:
        pytest.fail((result.stdout + result.stderr).strip(), pytrace=False)


def run_processes(commands: list[list[str]], env: dict[str, str]) -> list[str]:
    """Runs the commands together; returns each one's output, or fails the test."""
    outputs: list[list[str]] = [[] for _ in commands]
    last_output = [time.monotonic()]
    lock = threading.Lock()
    processes = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        for command in commands
    ]

    def pump(index: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with lock:
                outputs[index].append(line)
                last_output[0] = time.monotonic()

    readers = [
        threading.Thread(target=pump, args=(i, p), daemon=True) for i, p in enumerate(processes)
    ]
    for reader in readers:
        reader.start()
    started, failure = time.monotonic(), ""
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        with lock:
            quiet = now - last_output[0]
        if any(p.returncode not in (None, 0) for p in processes):
            failure = "a process failed; the others were stopped"
        elif quiet > STALL_SECONDS:
            failure = f"no progress for {STALL_SECONDS:.0f} s"
        elif now - started > LAST_RESORT_SECONDS:
            failure = f"still running after {LAST_RESORT_SECONDS:.0f} s"
        if failure:
            break
        time.sleep(0.1)
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
    for reader in readers:
        reader.join(timeout=10)
    texts = ["".join(lines) for lines in outputs]
    if failure or any(p.returncode != 0 for p in processes):
        report = "\n".join(
            f"--- process {i} (exit {p.returncode}):\n{text}"
            for i, (p, text) in enumerate(zip(processes, texts, strict=True))
        )
        pytest.fail(f"{failure or 'a process failed'}\n{report}", pytrace=False)
    return texts


@pytest.fixture
def run_check(testdevice_built: None, tmp_path: Path) -> Iterator[RunCheck]:
    """``run_check(name, ranks=1, env={...})``: runs check ``name`` of testdevice_checks.py, or
    with ``ranks`` > 1 the rank check ``name`` of testdevice_ranks.py in that many processes."""

    def run(name: str, ranks: int = 1, env: dict[str, str] | None = None) -> list[str]:
        if ranks == 1:
            commands = [[sys.executable, str(HERE / "testdevice_checks.py"), name]]
        else:
            script = str(HERE / "testdevice_ranks.py")
            commands = [
                [sys.executable, script, name, str(rank), str(ranks), str(tmp_path)]
                for rank in range(ranks)
            ]
        outputs = run_processes(commands, child_environment(env))
        for output in outputs:
            assert f"ok: {name}" in output.splitlines(), output
        return outputs

    yield run
