"""examples/train.py: real training on scikit-learn's digits with real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stratcore.launchers.base import rank_command
from stratcore.testing import watch

pytest.importorskip("sklearn", reason="the example's data set ships with scikit-learn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train.py"
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+): loss ([0-9.]+), val accuracy ([0-9.]+)", re.M)


def run_example(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MASTER_", "LOCAL_RANK", "WORLD_SIZE"))
    }
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "generated"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    # The example's process is rank 0: it starts as the launcher starts the other ranks.
    return watch.run(
        rank_command([sys.executable, str(SCRIPT), *args]),
        cwd=cwd,
        env=env,
    )


def epochs(output: str) -> list[tuple[int, float, float]]:
    """(epoch, loss, accuracy) of every per-epoch line."""
    return [(int(m[0]), float(m[2]), float(m[3])) for m in EPOCH_LINE.findall(output)]


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_learns_and_resumes(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt" / "digits.ckpt"
    first = run_example(
        "--strategy",
        "ddp",
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--epochs",
        "3",
        "--checkpoint",
        str(checkpoint),
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    history = epochs(first.stdout)
    # Only rank 0 reports: each epoch exactly once.
    assert [e for e, _, _ in history] == [1, 2, 3]
    assert history[-1][2] > 0.8, first.stdout
    assert history[-1][1] < history[0][1], "the training loss did not go down"
    assert "done: epoch 3" in first.stdout
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert saved["epoch"] == 3
    assert saved["accuracy"] == pytest.approx(history[-1][2], abs=1e-4)
    assert set(saved) >= {"model", "optimizer"}

    resumed = run_example(
        "--strategy",
        "ddp",
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--epochs",
        "4",
        "--checkpoint",
        str(checkpoint),
        "--resume",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed from {checkpoint} after epoch 3" in resumed.stdout
    history = epochs(resumed.stdout)
    assert [e for e, _, _ in history] == [4], resumed.stdout
    # A resumed model starts where the first run ended, not from scratch (~0.1 accuracy).
    assert history[0][2] > 0.8
    assert torch.load(checkpoint, map_location="cpu", weights_only=False)["epoch"] == 4


@pytest.mark.slow
def test_single_device_with_another_precision(tmp_path: Path) -> None:
    checkpoint = tmp_path / "single.ckpt"
    result = run_example(
        "--strategy",
        "single_device",
        "--devices",
        "1",
        "--precision",
        "bf16-mixed",
        "--epochs",
        "2",
        "--checkpoint",
        str(checkpoint),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    history = epochs(result.stdout)
    assert [e for e, _, _ in history] == [1, 2]
    assert history[-1][2] > 0.7

    # Resuming a run that already reached --epochs trains nothing.
    again = run_example(
        "--strategy",
        "single_device",
        "--devices",
        "1",
        "--epochs",
        "2",
        "--checkpoint",
        str(checkpoint),
        "--resume",
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    assert epochs(again.stdout) == []
    assert "nothing to do: the checkpoint is already at epoch 2" in again.stdout


def test_unknown_strategy_is_a_clear_error(tmp_path: Path) -> None:
    result = run_example("--strategy", "ddpp", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "strategy='ddpp' is not a registered strategy" in result.stderr
    assert "Traceback" not in result.stderr


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    result = run_example("--resume", "--checkpoint", str(tmp_path / "none.ckpt"), cwd=tmp_path)
    assert result.returncode == 2
    assert "there is no checkpoint at" in result.stderr
    assert not (tmp_path / "checkpoints").exists()
