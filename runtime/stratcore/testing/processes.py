"""Running scenarios in fresh processes, and finding processes that outlived their run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import find_free_port
from . import watch
from .environ import (
    RUN_MARKER_ENV,
    package_environ,
    package_name,
    package_registry_in_use,
)
from .scenarios import FAILED_AT, case_started, rank_zero_lines


def scenario_command(
    scenario: str, strategy: str, devices: int, options: dict[str, Any]
) -> list[str]:
    """The command that runs ``scenario`` (or ``cases``) of ``strategy`` in a fresh process:
    ``options`` become its command-line options, ``strategy_options`` (a dict) its JSON."""
    extra = []
    strategy_options = options.pop("strategy_options", {})
    for key, value in options.items():
        if value is not None:
            extra += [f"--{key.replace('_', '-')}", str(value)]
    launcher = package_registry_in_use().strategy_entry(strategy).cls.launcher_class
    command = [
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
    return launcher.job_command(command, devices)


def _scenario_environ(env: dict[str, str] | None, marker: str) -> dict[str, str]:
    environ = package_environ(package_name(), env)
    environ[RUN_MARKER_ENV] = marker
    return environ


def _result_of(stdout: str) -> Any:
    result = None
    for line in rank_zero_lines(stdout):
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return result


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    devices: int = 2,
    stall: float = watch.STALL,
    env: dict[str, str] | None = None,
    **options: Any,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scenario in a fresh process; returns the process and rank 0's parsed result.

    Keyword arguments become the scenario's command-line options (``precision="64-true"``,
    ``steps=3``, ``folder=...``); ``strategy_options`` is a dict of strategy options. There is
    no time limit: the run fails (``stratcore.testing.watch.Stalled``) only when none of its
    processes has used the CPU or written output for ``stall`` seconds.
    """
    skip_unless_optimizers_in_setup(strategy)
    command = scenario_command(scenario, strategy, devices, options)
    environ = _scenario_environ(env, uuid.uuid4().hex)
    what = f"scenario {scenario!r} of {strategy!r}"
    process = watch.run(command, what=what, env=environ, stall=stall)
    return process, _result_of(process.stdout)


#: How a job says that the port it was given is taken (torch's store, stratcore's launchers).
PORT_TAKEN = ("EADDRINUSE", "cannot listen on port")


def run_given_a_port(
    start: Callable[[str], list[watch.Job]], attempts: int = 3
) -> list[subprocess.CompletedProcess[str]]:
    """Run processes that meet on a port given to each of them, as a scheduler gives one
    (``start(port)`` starts them), until they end (``watch.finish_all``). When the port was
    taken by another process before the job bound it, the job runs again on another port."""
    for _ in range(attempts):
        # Free just now; another process may take it before the job binds it.
        done = watch.finish_all(start(str(find_free_port())))
        if not any(taken in run.stderr for run in done for taken in PORT_TAKEN):
            break
    return done


def optimizers_in_setup(strategy: str) -> bool:
    """Whether ``strategy``'s ``setup`` takes a model and its optimizers together, as the
    training scenarios do (else it takes the module alone, and its optimizers are made
    afterwards from the wrapped module)."""
    cls = package_registry_in_use().strategy_entry(strategy).cls
    return bool(getattr(cls, "optimizers_in_setup", True))


def skip_unless_optimizers_in_setup(strategy: str) -> None:
    """Skip the calling test for a strategy whose ``setup`` takes the module alone."""
    cls = package_registry_in_use().strategy_entry(strategy).cls
    if not optimizers_in_setup(strategy):
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
    #: Seconds from the start of the run to the failure.
    seconds_to_fail: float | None = None


#: How long every process of a failing job may go without using the CPU or writing output
#: before the run fails (``stratcore.testing.watch``). A launcher that stops the job after a failure
#: keeps its processes busy ending, however loaded the machine; one that waits instead (for a
#: collective's timeout, or a grace that never ends) leaves them idle, and is caught within
#: this many seconds.
FAILURE_STALL = 30.0


def run_failure_scenario(
    strategy: str,
    folder: Any,
    *,
    rank: int = 1,
    how: str = "raise",
    devices: int = 2,
    stall: float = FAILURE_STALL,
    env: dict[str, str] | None = None,
    kill_launcher: bool = False,
    **options: Any,
) -> FailureRun:
    """Run the ``fail`` scenario: rank ``rank`` raises, exits, SIGKILLs itself or hangs.

    With ``kill_launcher``, the launching process is SIGKILLed once the failing rank is in
    place (use it with ``how="hang"``): its ranks must notice and end. A job that does not
    end promptly fails the test (``stratcore.testing.watch.Stalled``) once none of its processes has
    used the CPU or written output for ``stall`` seconds, with what each of them was doing.
    """
    folder = Path(folder)
    command = scenario_command(
        "fail", strategy, devices, {**options, "rank": rank, "how": how, "folder": folder}
    )
    return run_failing_job(
        command,
        folder / FAILED_AT,
        what=f"the failing {strategy!r} job (rank {rank}: {how})",
        env=env,
        stall=stall,
        kill_launcher=kill_launcher,
    )


def run_failing_job(
    command: list[str],
    failed_at: Path,
    *,
    what: str,
    env: dict[str, str] | None = None,
    stall: float = FAILURE_STALL,
    kill_launcher: bool = False,
    case: str | None = None,
) -> FailureRun:
    """Run a job one of whose ranks fails and writes the time to ``failed_at``; how it ended,
    with every process of it still alive after its launcher ended (found by a marker in their
    environment, then killed). In a job of several cases, ``case`` names the failing one: the
    time to the failure counts from its start, not from the job's."""
    import signal

    marker = uuid.uuid4().hex
    begun = time.time()
    environ = _scenario_environ(env, marker)
    job = watch.Job(command, what=what, env=environ, stall=stall)
    try:
        if kill_launcher:
            job.wait_for(failed_at.is_file, "the failing rank to be in place to hang")
            time.sleep(0.5)  # let the other ranks enter their collective
            failed_at.write_text(repr(time.time()), encoding="utf-8")
            job.process.send_signal(signal.SIGKILL)
        finished = job.finish("every process of the job to end after its rank failed")
    finally:
        leftovers = leftover_processes(marker)
        ended = time.time()
        job.kill()
        _kill_marked(marker)
    failed = float(failed_at.read_text(encoding="utf-8")) if failed_at.is_file() else None
    started = (case_started(finished.stdout, case) if case else None) or begun
    return FailureRun(
        finished.returncode,
        finished.stdout,
        finished.stderr,
        None if failed is None else ended - failed,
        leftovers,
        None if failed is None else failed - started,
    )


def _marked_processes(marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``marker`` (found through /proc, or psutil)."""
    if Path("/proc").is_dir():
        return watch.marked_processes(RUN_MARKER_ENV, marker)
    try:
        import psutil
    except ImportError:
        return []
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(RUN_MARKER_ENV) == marker:
                found.append((process.pid, " ".join(process.info["cmdline"] or [])))
        except (psutil.Error, OSError):
            continue
    return found


def leftover_processes(marker: str, wait: float = 30.0) -> list[tuple[int, str]]:
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


def assert_job_stopped(run: FailureRun, *, rank: int | None, message: str | None = None) -> None:
    """A failing job ended non-zero, named ``rank`` (and ``message``), with nothing left.

    That it ended promptly is the run's own check: a job whose processes all sit idle for
    ``FAILURE_STALL`` seconds fails ``run_failing_job`` (a wall-clock limit would fail on a
    busy machine, where a healthy job is slow, and pass a slow launcher on an idle one).
    """
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
