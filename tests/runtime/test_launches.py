"""Scripts that launch more than once with the script-relaunching DDP launcher, and the test
support that finds processes a job left behind.

The ranks a script starts run the whole script, so they take part in its later launches too
(``test_precision.py`` and ``test_strategy_options.py`` run six launches in one job each).
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from stratcore import testing
from stratcore.launchers.base import RANK_PREFIX_ENV
from stratcore.testing import watch

from .support import SCRIPTS, finish, python, start


def test_rank_launching_more_often_than_rank_zero_ends_the_script() -> None:
    [(code, _, stderr)] = finish([start(python("launches.py", "extra_launch"))])
    assert code == 1
    assert stderr.rstrip().endswith(
        "rank 1 (local rank 1) entered launch number 2, but rank 0 ended the script after 1; "
        "every process must call launch() equally often"
    )


@pytest.mark.parametrize("mode", ["fail_between", "fail_slowly"])
def test_failure_between_launches_is_raised_by_the_next_launch(mode: str) -> None:
    [(code, stdout, _)] = finish([start(python("launches.py", mode))])
    assert code == 7, stdout
    assert "second launch failed: rank 1 (local rank 1) raised an exception:" in stdout
    assert "RuntimeError: rank 1 fails between launches" in stdout


def test_rank_launching_less_often_than_rank_zero_fails_its_launch() -> None:
    [(code, stdout, stderr)] = finish([start(python("launches.py", "fewer_launches"))])
    assert code == 7, stdout
    assert (
        "second launch failed: rank 1 (local rank 1) ended its script after 1 launch(es), while "
        "rank 0 is in launch number 2; every process must call launch() equally often"
    ) in stdout
    # Found by the launcher, not by the collective timeout of rank 0's second launch (which
    # is 1800 s, the default: waiting for it would stall the job first).
    assert "timed out" not in stdout + stderr


def test_rank_one_is_the_script_run_again_by_rank_zero() -> None:
    """Rank 1 is a fresh interpreter that rank 0's process started with the script's own
    command line, and /proc shows the job's marker in its environment as it does for rank 0
    (so what finds a job's processes finds it)."""
    [(code, stdout, stderr)] = finish([start(python("launches.py", "started"))])
    assert code == 0, stderr
    # Each rank writes its record at once; the ranks' other lines may fall around it.
    record = r"rank (\d+): pid (\d+) parent (\d+) marked (\d+) command ([^\n]*)"
    ranks = {
        int(found[0]): dict(zip(("pid", "parent", "marked", "command"), found[1:], strict=True))
        for found in re.findall(record, stdout)
    }
    assert sorted(ranks) == [0, 1], stdout
    zero, one = ranks[0], ranks[1]
    assert one["parent"] == zero["pid"], "rank 1 was not started by rank 0's process"
    assert one["command"] == zero["command"], "rank 1 does not run the script's command"
    assert zero["command"].endswith("launches.py started"), zero["command"]
    assert zero["marked"] == one["marked"] == "1", stdout


def _prefix(tmp_path: Path) -> dict[str, str]:
    """The environment of a job whose ranks start through ``scripts/rank_prefix.py``."""
    prefix = shlex.join([sys.executable, str(SCRIPTS / "rank_prefix.py")])
    return {RANK_PREFIX_ENV: prefix, "PREFIX_LOG": str(tmp_path / "prefix.log")}


def test_a_rank_prefix_starts_every_other_rank_through_it(tmp_path: Path) -> None:
    """STRATLIB_RANK_PREFIX goes before rank 1's command line; a prefix that starts the rank as
    its own child (as profilers do) leaves the job working: rank 1 keeps to its launcher."""
    [(code, stdout, stderr)] = finish(
        [start(python("launches.py", "started"), **_prefix(tmp_path))]
    )
    assert code == 0, stderr
    record = r"rank (\d+): pid (\d+) parent (\d+) marked \d+ command ([^\n]*)"
    ranks = {int(found[0]): found[1:] for found in re.findall(record, stdout)}
    assert sorted(ranks) == [0, 1], stdout
    [logged] = (tmp_path / "prefix.log").read_text(encoding="utf-8").splitlines()
    wrapper, command = logged.split(" ", 1)
    assert ranks[1][1] == wrapper, "rank 1 is not the prefix's child"
    assert command.endswith("launches.py started") and ranks[1][2] == ranks[0][2], command


def test_a_rank_started_through_a_prefix_ends_with_its_launcher(tmp_path: Path) -> None:
    """Rank 1 is the prefix's child, not rank 0's: it still ends when rank 0 is killed."""
    run = testing.run_failure_scenario("ddp", tmp_path, rank=0, how="kill", env=_prefix(tmp_path))
    assert run.returncode == -9
    testing.assert_job_stopped(run, rank=None)
    assert len((tmp_path / "prefix.log").read_text(encoding="utf-8").splitlines()) == 1


@pytest.mark.parametrize(("strategy", "ranks_under_it"), [("ddp", 2), ("ddp_spawn", 0)])
def test_a_jobs_command_starts_rank_zero_through_the_prefix_too(
    strategy: str, ranks_under_it: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Launcher.job_command``, with which the generated tests start a job, puts the prefix
    before rank 0's command where the script's own process is rank 0: every rank of a 'ddp' job
    runs under it. A 'ddp_spawn' job's script only starts its ranks (torch.multiprocessing
    starts them, without a prefix), and runs as it is."""
    for name, value in _prefix(tmp_path).items():
        monkeypatch.setenv(name, value)
    process, result = testing.run_scenario("train", strategy, devices=2, steps=1)
    assert process.returncode == 0, process.stderr[-3000:]
    assert result is not None, process.stdout[-3000:]
    log = tmp_path / "prefix.log"
    logged = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    assert len(logged) == ranks_under_it, logged
    assert all(" -m stratcore.testing " in line for line in logged), logged


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_leftover_processes_are_found_by_their_marker() -> None:
    marker = uuid.uuid4().hex
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**testing.clean_environ(), testing.RUN_MARKER_ENV: marker},
    )
    try:
        found = _found_within(marker, seconds=60.0)
        assert [pid for pid, _ in found] == [sleeper.pid], _describe(sleeper)
        assert "time.sleep(60)" in found[0][1]
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    start_time = time.monotonic()
    assert testing.leftover_processes(marker, wait=60.0) == []
    assert time.monotonic() - start_time < 30.0, "waited although nothing was left"


def _found_within(marker: str, seconds: float) -> list[tuple[int, str]]:
    """The marked processes, looked for until one shows up or ``seconds`` pass.

    ``Popen`` can return while the kernel is still inside the child's exec: the parent resumes
    once the old address space is released and the close-on-exec pipe is closed, and the new
    environment's bounds are set a little later. Until then /proc/<pid>/environ reads empty: on
    a 2-core machine with both cores busy, a read right after ``Popen`` returned found nothing
    in 1910 of 2000 starts of /bin/sleep (679 of 2000 on an idle machine)."""
    deadline = time.monotonic() + seconds
    while True:
        found = testing.leftover_processes(marker, wait=0.0)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def _describe(process: subprocess.Popen[bytes]) -> str:
    """What /proc says of ``process``, for a failure message."""
    proc = Path("/proc") / str(process.pid)
    try:
        environ = (proc / "environ").read_bytes().split(b"\0")
        marked = [entry for entry in environ if entry.startswith(testing.RUN_MARKER_ENV.encode())]
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError as error:
        return f"pid {process.pid} (exit code {process.poll()}): /proc unreadable: {error}"
    return f"pid {process.pid} (exit code {process.poll()}): state {state}, marker entries {marked}"


@pytest.mark.parametrize(
    ("run", "complaint"),
    [
        (testing.FailureRun(0, "", "", 1.0, []), "the job succeeded"),
        (testing.FailureRun(1, "", "rank 0 failed", 1.0, []), "does not name rank 1"),
        (
            testing.FailureRun(1, "", "rank 1 failed", 1.0, [(42, "python x")]),
            "processes outlived the job",
        ),
        (testing.FailureRun(1, "", "rank 1 failed", None, []), "did not record when it failed"),
    ],
)
def test_assert_job_stopped_can_fail(run: testing.FailureRun, complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint):
        testing.assert_job_stopped(run, rank=1)


def test_a_job_that_idles_after_its_failure_fails_the_run(tmp_path: Path) -> None:
    """A launcher that waits after a rank failed, instead of stopping the job, leaves every
    process idle: the run fails after the stall window, whatever the machine's load, and
    says what it waited for."""
    failed_at = tmp_path / "failed_at"
    idle_launcher = (
        "import sys, time; "
        f"open({str(failed_at)!r}, 'w').write(repr(time.time())); "
        "print('rank 1 failed', file=sys.stderr, flush=True); time.sleep(600)"
    )
    with pytest.raises(watch.Stalled, match="every process of the job to end"):
        testing.run_failing_job(
            [sys.executable, "-c", idle_launcher], failed_at, what="an idle launcher", stall=3.0
        )
