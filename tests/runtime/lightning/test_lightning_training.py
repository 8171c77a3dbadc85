"""Two real CPU ranks through Lightning with the 'acme' glue: Trainer and Fabric.

The oracle is plain torch: one process, SGD on the whole batch. DDP averages the gradients of
two equal halves, which is the gradient of the whole batch, so the weights must agree.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from stratcore.testing import watch

from tests.support import REPO

SUPPORT = Path(__file__).parent / "support"
ROOT = REPO
STEPS = 3

sys.path.insert(0, str(SUPPORT))
import common  # noqa: E402


def run_two_ranks(script: str, out: Path) -> list[dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SUPPORT), str(ROOT / "runtime"), str(ROOT / "generator"), str(ROOT / "generated")]
    )
    for name in (
        "LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "GROUP_RANK",
        "LOCAL_WORLD_SIZE",
        "ACME_JOB_ID",
    ):
        env.pop(name, None)
    done = watch.run(
        [sys.executable, str(SUPPORT / script), str(out), str(STEPS)],
        env=env,
        cwd=out,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in reports] == [0, 1]
    return reports


def check_common(reports: list[dict]) -> None:
    expected = common.reference(STEPS)
    for report in reports:
        assert report["world_size"] == 2
        for name, values in expected.items():
            assert report["weights"][name] == pytest.approx(values, abs=1e-6)
        # the backend's init hook ran once in each process; step hooks once per step
        assert report["calls"]["init"] == 1
        assert report["calls"]["after_backward"] == STEPS
        assert report["calls"]["after_optimizer_step"] == STEPS
        # 'acme' has no native mean and cannot reduce int64: both emulated
        assert report["mean_int64"] == [1.5, 15.0]
        assert report["sum_int64"] == [3, 30]
        assert report["sum_int64_dtype"] == "torch.int64"
        assert report["mean_float"] == [2.0]


@pytest.mark.slow
def test_trainer_fits_on_two_ranks_like_one_process(tmp_path: Path) -> None:
    reports = run_two_ranks("train_trainer.py", tmp_path)
    check_common(reports)
    for rank, report in enumerate(reports):
        assert report["process_group_backend"] == "gloo"  # the spec's backend's name
        assert report["dist_backend"] == "gloo"
        assert report["mean_int64_dtype"] == "torch.float32"
        assert report["mean_default"] == [2.0]  # Lightning's default reduce_op is 'mean'
        assert report["non_tensor"] == "text"
        assert report["ints_untouched"] == [rank + 1, 10 * (rank + 1)]
        assert report["environment"] == "LightningEnvironment"
        assert report["release_at_exit"] is True


@pytest.mark.slow
def test_fabric_trains_on_two_ranks_like_one_process(tmp_path: Path) -> None:
    check_common(run_two_ranks("train_fabric.py", tmp_path))
