"""A failing rank ends the whole job within seconds, with its error, leaving no process behind.

Each case runs the ``fail`` scenario of ``stratcore.testing`` in a fresh process (2 ranks,
gloo): one rank raises, calls ``os._exit``, SIGKILLs itself or hangs while the other waits in a
collective. Processes are found by a marker in their environment, through /proc. (An exception
on rank 1 is also covered by the generated tests of every strategy.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stratcore import testing

#: The strategy's collective timeout in the hanging cases. (That a job stops promptly after a
#: failure is the run's own check: ``testing.FAILURE_STALL``.)
HANG_TIMEOUT = 5


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
@pytest.mark.parametrize(
    ("rank", "how", "says"),
    [
        (0, "raise", "deliberate failure on rank 0"),
        (1, "raise_slowly", "deliberate failure on rank 1"),
        (1, "exit", "exited with code 3"),
        (1, "kill", "was killed by signal SIGKILL"),
    ],
)
def test_failing_rank_stops_the_job(
    strategy: str, rank: int, how: str, says: str, tmp_path: object
) -> None:
    run = testing.run_failure_scenario(strategy, tmp_path, rank=rank, how=how)
    testing.assert_job_stopped(run, rank=rank, message=says)


def test_a_failed_spawn_job_leaves_no_error_file_behind(tmp_path: Path) -> None:
    # torch's spawned processes write their error into a file of the temporary folder, which
    # the launcher reads for its report; nothing else removes it.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    run = testing.run_failure_scenario(
        "ddp_spawn", tmp_path, rank=1, how="raise", env={"TMPDIR": str(temporary)}
    )
    testing.assert_job_stopped(run, rank=1, message="deliberate failure on rank 1")
    assert sorted(p.name for p in temporary.iterdir() if "errorfile" in p.name) == []


def test_popen_rank_zero_killed_takes_the_other_ranks_with_it(tmp_path: object) -> None:
    # Rank 0 is the launching process itself: nothing is left to report, but the processes it
    # started notice that their launcher is gone and end.
    run = testing.run_failure_scenario("ddp", tmp_path, rank=0, how="kill")
    assert run.returncode == -9
    testing.assert_job_stopped(run, rank=None)


def test_popen_rank_zero_exiting_takes_the_other_ranks_with_it(tmp_path: object) -> None:
    run = testing.run_failure_scenario("ddp", tmp_path, rank=0, how="exit")
    assert run.returncode == 3
    testing.assert_job_stopped(run, rank=None)


def test_spawn_launcher_killed_takes_every_rank_with_it(tmp_path: object) -> None:
    run = testing.run_failure_scenario(
        "ddp_spawn",
        tmp_path,
        rank=1,
        how="hang",
        kill_launcher=True,
        strategy_options={"timeout": 120},
    )
    assert run.returncode == -9
    testing.assert_job_stopped(run, rank=None)


@pytest.mark.parametrize(("strategy", "rank"), [("ddp", 1), ("ddp", 0), ("ddp_spawn", 1)])
def test_hanging_rank_ends_the_job_at_the_timeout(
    strategy: str, rank: int, tmp_path: object
) -> None:
    run = testing.run_failure_scenario(
        strategy, tmp_path, rank=rank, how="hang", strategy_options={"timeout": HANG_TIMEOUT}
    )
    # The other rank is the one that notices: its collective timed out.
    waiting = 1 - rank
    testing.assert_job_stopped(run, rank=waiting, message="timed out after 5 s")
    assert "CollectiveTimeoutError" in run.stderr
    assert "Timed out waiting" in run.stderr, "the backend's own error is not kept as the cause"
    assert run.seconds_to_stop is not None and run.seconds_to_stop >= HANG_TIMEOUT - 0.5
