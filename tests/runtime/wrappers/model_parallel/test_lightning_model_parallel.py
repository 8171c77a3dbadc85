"""Lightning's Trainer with the 'model_parallel' plugin the Lightning target renders (on
Lightning's own ModelParallelStrategy) on 4 CPU ranks over gloo: 2 x 2 parallelism laid out
by ``configure_model`` trains like one process on the whole batch, and a fit resumed from
the Trainer's distributed checkpoint ends where uninterrupted training does."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from .support import assert_close, run_job
from .test_model_parallel import MP

pytest.importorskip("lightning", reason="the Lightning target needs lightning>=2.6,<2.7")
#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lightning-model-parallel")]

STEPS, SAVED, LR = 3, 2, 1e-2


def reference(steps: int) -> dict[str, torch.Tensor]:
    """Weights after ``steps`` Adam steps on the whole batch in one process."""
    model = MP.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = MP.batch()
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lightning_model_parallel")
    args = ["--steps", str(STEPS), "--saved", str(SAVED), "--lr", str(LR)]
    result: dict[str, Any] = run_job("lightning_model_parallel.py", folder, *args)
    return result


def test_the_trainer_runs_the_generated_plugin_on_a_two_by_two_mesh(report: dict[str, Any]) -> None:
    for fit in ("saved", "resumed"):
        result = report[fit]
        assert (
            result["strategy"] == "stratlib.lightning.pytorch.model_parallel.ModelParallelStrategy"
        )
        assert result["backend"] == "gloo"  # the spec's backend for CPU devices
        assert result["mesh"] == {"shape": [2, 2], "dims": ["data_parallel", "tensor_parallel"]}
        # The ranks of a tensor-parallel pair read the same samples.
        assert result["samplers"] == [[2, 0], [2, 0], [2, 1], [2, 1]]


def test_fit_trains_like_one_process(report: dict[str, Any]) -> None:
    assert report["saved"]["global_step"] == SAVED
    assert_close(report["saved"]["params"], reference(SAVED), atol=1e-5)


def test_fit_resumes_from_the_trainers_distributed_checkpoint(report: dict[str, Any]) -> None:
    assert report["checkpoint_is_dir"]
    assert report["resumed"]["global_step"] == STEPS
    # Other initial weights, and Adam's moments: all came from the checkpoint.
    assert_close(report["resumed"]["params"], reference(STEPS), atol=1e-5)
