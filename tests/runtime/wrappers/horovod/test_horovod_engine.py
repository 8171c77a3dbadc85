"""The ``horovod`` strategy on the real Horovod (built with Gloo by .ci/horovod), started the way
a user starts it: ``horovodrun -np 2 -H localhost:2 --gloo python script.py``.

One horovodrun job runs every scenario of ``horovod_job.py``, each a launch of a strategy of its
own, and each rank reports every scenario separately; the tests below read those reports and
compare them with one process training on the whole batch, computed here. The job ends with
rank 1 raising, which must end it promptly with that error. The generated tests of
specs/horovod.yaml run on the real package too (generated/tests/test_horovod.py: registry
names, precisions, the strategy API and collectives, a checkpoint round trip, another
precision, a failing rank), started by horovodrun through ``HorovodRunLauncher.job_command``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore.launchers.horovodrun import horovodrun_executable
from stratcore.testing import (
    assert_job_stopped,
    assert_parameters_close,
    reference_batch,
    reference_model,
    reference_parameters,
)
from stratcore.testing.processes import FailureRun, run_failing_job
from torch import nn

HERE = Path(__file__).resolve().parent
JOB = HERE / "horovod_job.py"
#: What rank 1 raises at the end of the job.
FAILURE = "deliberate failure on rank 1 of the horovodrun job"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("horovodrun"),
    pytest.mark.usefixtures("horovod"),
]


class Job:
    """The finished horovodrun job: how it ended and what each rank reported."""

    def __init__(self, run: FailureRun, folder: Path) -> None:
        self.run = run
        self.ranks: list[dict[str, Any]] = []
        for rank in range(2):
            report = folder / f"rank{rank}.json"
            self.ranks.append(json.loads(report.read_text()) if report.is_file() else {})

    def result(self, scenario: str, rank: int = 0) -> Any:
        """One rank's result of ``scenario``, failing with its error or the job's output."""
        reported = self.ranks[rank].get(scenario)
        if reported is None:
            raise AssertionError(
                f"rank {rank} did not report {scenario!r}; the job's output:\n"
                f"{self.run.stdout[-3000:]}\n{self.run.stderr[-5000:]}"
            )
        assert (
            "error" not in reported
        ), f"{scenario!r} failed on rank {rank}:\n{reported['traceback']}"
        return reported["result"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    folder = tmp_path_factory.mktemp("horovodrun")
    command = [horovodrun_executable(), "-np", "2", "-H", "localhost:2", "--gloo"]
    command += [sys.executable, str(JOB), str(folder)]
    run = run_failing_job(
        command,
        folder / "failed_at",
        what="the horovodrun job of the Horovod scenarios",
        case="rank_raises",
    )
    return Job(run, folder)


def _reference(
    steps: int, optimizer: str = "sgd", max_norm: float | None = None
) -> list[torch.Tensor]:
    """One process training on the whole batch."""
    model = reference_model()
    if optimizer == "adamw":
        optim: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = reference_batch()
    for _ in range(steps):
        optim.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if max_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optim.step()
    return [p.detach().clone() for p in model.state_dict().values()]


def test_each_process_is_a_rank_of_the_horovodrun_job(job: Job) -> None:
    for rank in range(2):
        assert job.result("where_am_i", rank) == {
            "rank": rank,
            "world_size": 2,
            "local_rank": rank,
            "horovod": [rank, 2, rank],
            "environment": "HorovodEnvironment",
            "launcher": "HorovodRunLauncher",
            "is_global_zero": rank == 0,
        }


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_trains_like_one_process(job: Job, optimizer: str) -> None:
    """Each rank trains on half the batch; Horovod averages the gradients. With AdamW the
    optimizer's first step must be the first it counts (a fresh optimizer is not stepped to
    create its state)."""
    for rank in range(2):
        result = job.result(f"trains_{optimizer}", rank)
        assert_parameters_close(result["params"], _reference(3, optimizer))


def test_clips_the_averaged_gradients(job: Job) -> None:
    """Clipping to a norm below the gradients' clips the averaged gradients, as one process
    clips the gradient of the whole batch (clipping each rank's own would differ)."""
    result = job.result("clips_gradients")
    assert min(result["norms"]) > 0.05, f"the gradients were never clipped: {result['norms']}"
    assert_parameters_close(result["params"], _reference(3, max_norm=0.05))


@pytest.mark.parametrize("scenario", ["backward_passes_per_step", "block_backward_sync"])
def test_accumulates_gradients(job: Job, scenario: str) -> None:
    """Two backward passes per step, averaged once, equal one process on the whole batch."""
    for rank in range(2):
        assert_parameters_close(job.result(scenario, rank)["params"], reference_parameters(3))


def test_fp16_compression_averages_float16_gradients(job: Job) -> None:
    """The averaged gradients are the mean of both ranks' own, sent as float16: every value
    is a float16 number, within float16's precision of the exact mean, which is not."""
    own = [torch.tensor(g) for g in job.result("fp16_compression", 0)["own"]]
    peer = [torch.tensor(g) for g in job.result("fp16_compression", 1)["own"]]
    averaged = [torch.tensor(g) for g in job.result("fp16_compression", 0)["averaged"]]
    exact = [(a + b) / 2 for a, b in zip(own, peer, strict=True)]
    assert not all(torch.equal(e.half().double(), e) for e in exact)
    for got, want in zip(averaged, exact, strict=True):
        assert torch.equal(got.half().double(), got), "averaged gradients are not float16 values"
        assert torch.allclose(got, want, rtol=2e-3, atol=1e-4), (got - want).abs().max()
    assert (
        job.result("fp16_compression", 1)["averaged"]
        == job.result("fp16_compression", 0)["averaged"]
    )


def test_resumes_from_a_checkpoint(job: Job) -> None:
    """2 AdamW steps, saved; a later launch loads them into other weights and a fresh
    optimizer and takes 2 more: the result of 4 steps in one go."""
    assert job.result("checkpoint_save")["saved"] is True
    for rank in range(2):
        result = job.result("checkpoint_resume", rank)
        assert result["remaining"] == {"step": 2}
        assert_parameters_close(result["params"], _reference(4, "adamw"))


def test_all_gather_carries_gradients_back(job: Job) -> None:
    """Every rank computes sum_k w_k * x_k over the gathered values: each rank's value gets
    the gradient of every rank's loss (2 ranks x its weight), as torch.distributed gives it."""
    for rank in range(2):
        result = job.result("all_gather_gradients", rank)
        assert result["gathered"] == [1.0, 2.0]
        assert result["grad"] == [2.0 * (rank + 1)]


def test_a_rank_that_raises_ends_the_job_with_its_error(job: Job) -> None:
    assert_job_stopped(job.run, rank=1, message=FAILURE)
