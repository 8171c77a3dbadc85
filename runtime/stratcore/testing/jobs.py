"""The real runs of the generated tests: one job per strategy, one pytest test per case.

Each strategy's real-run cases (it trains like one process, also where moving the model gives
it new Parameter objects, it trains in another precision, the strategy API and collectives, a
checkpoint round trip, and for several processes a rank that fails) are pytest tests of their own, but starting processes costs more than most of
them take. So the first case of a strategy to run starts one job (``python -m
stratcore.testing cases``) that runs every case, each in a launch of a strategy of its own,
and reports each as it ends; the strategy's other cases read that report. The failing rank
comes last, since it ends the job: the job is run as ``run_failure_scenario`` runs one, and
how it ended (its exit, its error output, how soon its processes stopped after the failure,
and any left behind) is that case's report. Test processes of pytest-xdist share the reports
through files in the session's temporary folder, under a lock, so that one of them runs the
job while another waits for its report.

A case the job did not report (the job failed in it, or before it) runs again in a job of its
own, the way ``run_scenario`` runs one scenario (``run_failure_scenario`` the failing rank), so
that its failure reads as if it had always run alone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .assertions import (
    assert_api,
    assert_checkpoint_round_trip,
    assert_trains_in_precision,
    assert_trains_like_one_process,
)
from .environ import package_name
from .expectations import Expectation, precision_variant, runnable_or_skip
from .processes import (
    FailureRun,
    assert_job_stopped,
    optimizers_in_setup,
    run_failing_job,
    run_failure_scenario,
    run_scenario,
    scenario_command,
    skip_unless_optimizers_in_setup,
)
from .rows import RUN_CASES, StrategyRow
from .scenarios import CASE_MARKER, FAILED_AT, rank_zero_lines

#: Steps of the training cases (one process trains as many on the whole batch to compare).
STEPS = 3
VARIANT_STEPS = 4


#: The case whose rank 1 raises: the last of a job of several processes.
FAILURE_CASE = "rank_failure_stops_the_job"
#: What the failing rank raises (``scenarios.fail``), which the job's error must name.
FAILURE_MESSAGE = "deliberate failure on rank 1"


@dataclass(frozen=True)
class JobReport:
    """How a job of several cases ended: its exit status, its error output, the result of
    every case rank 0 reported, and how its failing rank ended it (a ``FailureRun``'s fields;
    None for a job without one, or one that ended before it)."""

    returncode: int
    stderr: str
    results: dict[str, Any]
    failure: dict[str, Any] | None = None


def job_cases(folder: Path, variant: str | None, devices: int = 1) -> list[dict[str, Any]]:
    """The cases of one strategy's job, in the order it runs them; training in ``variant`` is a
    launch of a strategy built for that precision; with several ``devices``, rank 1 fails in
    the last one."""
    cases: list[dict[str, Any]] = [
        {
            "case": "strategy_api_and_collectives",
            "scenario": "api",
            "args": {"folder": str(folder)},
        },
        {"case": "trains_like_one_process", "scenario": "train", "args": {"steps": STEPS}},
        {
            "case": "trains_after_moves_that_replace_parameters",
            "scenario": "train_after_replacing_moves",
            "args": {"steps": STEPS},
        },
        {
            "case": "checkpoint_round_trip",
            "scenario": "checkpoint",
            "args": {"folder": str(folder)},
        },
    ]
    if variant is not None:
        cases.append(
            {
                "case": "trains_in_another_precision",
                "scenario": "train",
                "args": {"steps": VARIANT_STEPS},
                "precision": variant,
            }
        )
    if devices > 1:
        cases.append(
            {
                "case": FAILURE_CASE,
                "scenario": "fail",
                "args": {"failing_rank": 1, "how": "raise", "folder": str(folder)},
            }
        )
    return cases


def reported_cases(stdout: str) -> dict[str, Any]:
    """The cases a job reported (``scenarios.run_case``), by name."""
    results = {}
    for line in rank_zero_lines(stdout):
        if line.startswith(CASE_MARKER):
            report = json.loads(line[len(CASE_MARKER) :])
            results[report["case"]] = report["result"]
    return results


class ScenarioJobs:
    """The jobs of one test session, by strategy; ``folder`` keeps their reports and files."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._reports: dict[str, JobReport] = {}

    @classmethod
    def for_session(cls, tmp_path_factory: Any, config: Any) -> ScenarioJobs:
        """The jobs of this pytest session (``config`` is its ``pytestconfig``), shared by its
        xdist workers: each has its own temporary folder inside the session's."""
        base = Path(tmp_path_factory.getbasetemp())
        worker = hasattr(config, "workerinput")  # set by pytest-xdist in its workers only
        return cls((base.parent if worker else base) / "scenario-jobs")

    def check(self, row: StrategyRow, case: str) -> None:
        """Assert one real-run case of ``row``'s strategy (one of ``RUN_CASES``, or
        ``FAILURE_CASE``)."""
        accelerator = runnable_or_skip(row.cls, row.devices)
        expected = row.expectation(accelerator)
        variant = precision_variant(row.cls, accelerator)
        if case == "trains_in_another_precision" and variant is None:
            import pytest

            pytest.skip("the default is the only precision here")
        if case == FAILURE_CASE:
            # A strategy the training scenarios cannot set up has no job; its rank fails alone.
            runs = optimizers_in_setup(row.name)
            failure = self.report(row, accelerator, variant).failure if runs else None
            run = FailureRun(**failure) if failure else self._failing_alone(row, accelerator)
            assert_job_stopped(run, rank=1, message=FAILURE_MESSAGE)
            return
        report = self.report(row, accelerator, variant)
        if case in report.results:
            result = report.results[case]
        else:
            result = self._alone(row, accelerator, case, variant)
        assert_case(case, result, expected, variant)

    def report(self, row: StrategyRow, accelerator: str, variant: str | None) -> JobReport:
        """The report of ``row``'s job on ``accelerator``, running the job if no test process
        of this session has run it yet."""
        key = f"{package_name()}-{row.name}-{accelerator}-{row.devices}"
        if key not in self._reports:
            folder = self.folder / key

            def run() -> dict[str, Any]:
                folder.mkdir(parents=True, exist_ok=True)
                cases = job_cases(folder, variant, row.devices)
                return _run_job(row, accelerator, cases).__dict__

            self._reports[key] = JobReport(**once_per_session(self.folder, key, run))
        return self._reports[key]

    def _failing_alone(self, row: StrategyRow, accelerator: str) -> FailureRun:
        """Rank 1 failing in a job of its own (the strategy's job ended before it failed)."""
        folder = self.folder / f"{package_name()}-{row.name}-{accelerator}-{FAILURE_CASE}"
        folder.mkdir(parents=True, exist_ok=True)
        return run_failure_scenario(
            row.name, folder, accelerator=accelerator, devices=row.devices, rank=1, how="raise"
        )

    def _alone(self, row: StrategyRow, accelerator: str, case: str, variant: str | None) -> Any:
        """Run one case in a job of its own (its strategy's job did not report it)."""
        folder = self.folder / f"{package_name()}-{row.name}-{accelerator}-{case}"
        folder.mkdir(parents=True, exist_ok=True)
        (spec,) = [c for c in job_cases(folder, variant) if c["case"] == case]
        process, result = run_scenario(
            spec["scenario"],
            row.name,
            accelerator=accelerator,
            devices=row.devices,
            precision=spec.get("precision"),
            **spec["args"],
        )
        assert process.returncode == 0, process.stderr
        return result


def _run_job(row: StrategyRow, accelerator: str, cases: list[dict[str, Any]]) -> JobReport:
    """Run the job of ``cases`` for ``row``'s strategy; with a failing rank among them, as a job
    that must end on that failure (``run_failing_job``)."""
    failing = [case for case in cases if case["case"] == FAILURE_CASE]
    if not failing:
        process, _ = run_scenario(
            "cases", row.name, accelerator=accelerator, devices=row.devices, cases=json.dumps(cases)
        )
        return JobReport(process.returncode, process.stderr, reported_cases(process.stdout))
    skip_unless_optimizers_in_setup(row.name)
    command = scenario_command(
        "cases",
        row.name,
        row.devices,
        {"accelerator": accelerator, "cases": json.dumps(cases)},
    )
    failed_at = Path(failing[0]["args"]["folder"]) / FAILED_AT
    run = run_failing_job(command, failed_at, what=f"the cases of {row.name!r}", case=FAILURE_CASE)
    # A job that ended before its rank failed says nothing of the failure.
    failure = run.__dict__ if failed_at.is_file() else None
    return JobReport(run.returncode, run.stderr, reported_cases(run.stdout), failure)


def assert_case(case: str, result: Any, expected: Expectation, variant: str | None) -> None:
    """What each real-run case asserts of its scenario's report."""
    if case in ("trains_like_one_process", "trains_after_moves_that_replace_parameters"):
        assert_trains_like_one_process(result, steps=STEPS, expected=expected)
    elif case == "trains_in_another_precision":
        assert variant is not None
        assert_trains_in_precision(result, variant)
    elif case == "strategy_api_and_collectives":
        assert_api(result, world_size=expected.devices, expected=expected)
    elif case == "checkpoint_round_trip":
        assert_checkpoint_round_trip(result)
    else:
        raise ValueError(f"no real-run case {case!r}; the cases are {', '.join(RUN_CASES)}")


def once_per_session(folder: Path, key: str, produce: Callable[[], dict[str, Any]]) -> Any:
    """What ``produce`` returns (JSON), produced by the first test process of the session to
    ask for ``key`` and read from ``folder`` by every other (pytest-xdist's workers share the
    session's temporary folder); a process asking meanwhile waits for it."""
    stored = folder / f"{key}.json"
    with _locked(folder / f"{key}.lock"):
        if stored.is_file():
            return json.loads(stored.read_text(encoding="utf-8"))
        result = produce()
        temporary = stored.with_suffix(".tmp")
        temporary.write_text(json.dumps(result), encoding="utf-8")
        temporary.replace(stored)
        return result


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (where the platform has ``fcntl``; elsewhere every
    test process runs its own jobs)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
