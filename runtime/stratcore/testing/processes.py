"""Running scenarios in fresh processes, and finding processes that outlived their run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .environ import (
    RUN_MARKER_ENV,
    package_environ,
    package_name,
    package_registry_in_use,
)


def _scenario_command(
    scenario: str, strategy: str, devices: int, options: dict[str, Any]
) -> list[str]:
    extra = []
    strategy_options = options.pop("strategy_options", {})
    for key, value in options.items():
        if value is not None:
            extra += [f"--{key.replace('_', '-')}", str(value)]
    return [
        sys.executable,
        "-m",
        "stratcore.testing",
        "--package",
        package_name(),
        scenario,
        strategy,
        "--devices",
        str(devices),
        "--options",
        json.dumps(strategy_options),
        *extra,
    ]


def _scenario_environ(env: dict[str, str] | None, marker: str) -> dict[str, str]:
    environ = package_environ(package_name(), env)
    environ[RUN_MARKER_ENV] = marker
    return environ


def _result_of(stdout: str) -> Any:
    result = None
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return result


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    devices: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
    **options: Any,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scenario in a fresh process; returns the process and rank 0's parsed result.

    Keyword arguments become the scenario's command-line options (``precision="64-true"``,
    ``steps=3``, ``folder=...``); ``strategy_options`` is a dict of strategy options.
    """
    _skip_unless_optimizers_in_setup(strategy)
    command = _scenario_command(scenario, strategy, devices, options)
    environ = _scenario_environ(env, uuid.uuid4().hex)
    process = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ)
    return process, _result_of(process.stdout)


def _skip_unless_optimizers_in_setup(strategy: str) -> None:
    """Skip the calling test for a strategy whose ``setup`` takes the module alone (its
    optimizers are made afterwards from the wrapped module): the scenarios set up a model
    and its optimizer together."""
    cls = package_registry_in_use().strategy_entry(strategy).cls
    if not getattr(cls, "optimizers_in_setup", True):
        import pytest

        pytest.skip(
            f"{cls.__name__} sets up the module alone and its optimizers afterwards; the shared "
            "training scenarios set up both together"
        )


@dataclass
class FailureRun:
    """How a ``fail`` scenario ended."""

    returncode: int
    stdout: str
    stderr: str
    #: Seconds from the failure (or the start of the hang, or the launcher's kill) until every
    #: process of the run had ended.
    seconds_to_stop: float | None
    #: Processes of the run still alive a few seconds after the launcher ended: (pid, command).
    leftovers: list[tuple[int, str]]


def run_failure_scenario(
    strategy: str,
    folder: Any,
    *,
    rank: int = 1,
    how: str = "raise",
    devices: int = 2,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    kill_launcher: bool = False,
    **options: Any,
) -> FailureRun:
    """Run the ``fail`` scenario: rank ``rank`` raises, exits, SIGKILLs itself or hangs.

    With ``kill_launcher``, the launching process is SIGKILLed once the failing rank is in
    place (use it with ``how="hang"``): its ranks must notice and end.
    """
    import signal

    folder = Path(folder)
    command = _scenario_command(
        "fail", strategy, devices, {**options, "rank": rank, "how": how, "folder": folder}
    )
    marker = uuid.uuid4().hex
    failed_at = folder / "failed_at"
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_scenario_environ(env, marker),
    )
    try:
        if kill_launcher:
            deadline = time.monotonic() + timeout
            while (
                not failed_at.is_file() and process.poll() is None and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            time.sleep(0.5)  # let the other ranks enter their collective
            failed_at.write_text(repr(time.time()), encoding="utf-8")
            process.send_signal(signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_marked(marker)
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the failing job did not end within {timeout} s:\n{stderr[-4000:]}"
        ) from None
    leftovers = leftover_processes(marker)
    ended = time.time()
    seconds = ended - float(failed_at.read_text(encoding="utf-8")) if failed_at.is_file() else None
    _kill_marked(marker)
    return FailureRun(process.returncode, stdout, stderr, seconds, leftovers)


def _marked_processes(marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``marker`` (found through /proc, or psutil)."""
    needle = f"{RUN_MARKER_ENV}={marker}".encode()
    found = []
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2 :].startswith(("Z", "X")):
                    continue  # ended, waiting to be reaped
                command = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            found.append((int(entry.name), command.strip()))
        return found
    try:
        import psutil
    except ImportError:
        return []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(RUN_MARKER_ENV) == marker:
                found.append((process.pid, " ".join(process.info["cmdline"] or [])))
        except (psutil.Error, OSError):
            continue
    return found


def leftover_processes(marker: str, wait: float = 5.0) -> list[tuple[int, str]]:
    """Processes of a run still alive ``wait`` seconds after its launcher ended (they may take
    a moment to notice that their launcher is gone); returns as soon as none is left."""
    deadline = time.monotonic() + wait
    while True:
        found = _marked_processes(marker)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _kill_marked(marker: str) -> None:
    import signal

    for pid, _ in _marked_processes(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def assert_job_stopped(
    run: FailureRun, *, rank: int | None, message: str | None = None, within: float = 20.0
) -> None:
    """A failing job ended non-zero, named ``rank`` (and ``message``), quickly, with nothing left."""
    assert (
        run.returncode != 0
    ), f"the job succeeded although rank {rank} failed:\n{run.stderr[-3000:]}"
    if rank is not None:
        assert (
            f"rank {rank}" in run.stderr
        ), f"the error does not name rank {rank}:\n{run.stderr[-3000:]}"
    if message is not None:
        assert message in run.stderr, f"the error does not say {message!r}:\n{run.stderr[-3000:]}"
    assert not run.leftovers, f"processes outlived the job: {run.leftovers}"
    assert run.seconds_to_stop is not None, "the failing rank did not record when it failed"
    assert (
        run.seconds_to_stop < within
    ), f"the job took {run.seconds_to_stop:.1f} s to stop (limit {within} s)"
