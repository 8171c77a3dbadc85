"""Launch and collective fixes, on 2 real ranks: results of any size come back from spawned
processes, fsdp tears down after a job that never ran a forward pass, and ``reduce`` takes
numbers and collections."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.testing import watch

from tests.support import REPO

HERE = Path(__file__).resolve().parent
GENERATED = REPO / "generated"

# Tests of the launchers: ranks start as users' ranks do (see the repository's conftest).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ranks_as_users_start_them")]


def _scenario(name: str, folder: Path) -> Any:
    command = [sys.executable, str(HERE / "scripts" / "fixes.py"), name, str(folder)]
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    process = watch.run(command, env=env, cwd=folder)
    assert process.returncode == 0, f"{name} failed:\n{process.stderr[-4000:]}"
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"{name} reported nothing:\n{process.stdout[-2000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_ddp_spawn_returns_a_result_far_larger_than_a_pipe_holds(tmp_path: Path) -> None:
    result = _scenario("spawn_large", tmp_path)
    assert result["numel"] == 1_000_000 and result["last"] == 999_999.0
    assert result["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_fsdp_loads_a_checkpoint_and_ends_without_a_forward_pass(tmp_path: Path) -> None:
    result = _scenario("fsdp_load_only", tmp_path)
    assert result == {"epoch": 3, "values": [0.25]}, "the launch's return value was lost"


def test_reduce_over_two_ranks_takes_numbers_dicts_and_lists(tmp_path: Path) -> None:
    result = _scenario("reduce", tmp_path)
    # Ranks 0 and 1: counts 1 + 2; parts [0, 2] + [1, 2]; 3 + 3; mean of 0 and 1.
    assert result == {
        "count": 3,
        "parts": [[1.0, 4.0], 6],
        "mean": 0.5,
        "mean_dtype": "torch.float32",
    }


@pytest.mark.parametrize("asynchronous", [False, True], ids=["synchronous", "asynchronous"])
def test_a_sharded_save_killed_midway_leaves_the_previous_checkpoint(
    asynchronous: bool, tmp_path: Path
) -> None:
    from stratcore.checkpoints.sharded import consolidated

    command = [sys.executable, str(HERE / "scripts" / "killed_save.py"), str(tmp_path)]
    if asynchronous:
        command.append("--async-io")
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    # In a session of its own: the job's ranks form one process group, killed together.
    job = watch.Job(command, env=env, start_new_session=True)
    try:
        job.wait_for(lambda: "\n" in job.stdout, "the first save")
        assert job.stdout.startswith("saved 1\n"), "the first save did not complete"
        killed = False
        while job.process.poll() is None:
            written = sum(
                f.stat().st_size
                for partial in tmp_path.glob(".last.ckpt.partial-*")
                for f in partial.glob("*.distcp")
            )
            if written > 50_000_000:  # the second save is well under way
                os.killpg(job.process.pid, signal.SIGKILL)
                killed = True
                break
            job.check("the second save to write 50 MB")
            time.sleep(0.01)
        ended = job.finish()
    finally:
        job.kill()
    remaining_output = ended.stdout.removeprefix("saved 1\n")
    assert killed, (
        f"the second save was never seen under way; the job ended (exit {ended.returncode}) "
        f"with {remaining_output!r} and:\n{ended.stderr[-3000:]}"
    )
    assert "saved 4" not in remaining_output

    # The last save that completed before the kill, whole: every parameter from that one step
    # (step 1 where the kill came during the first large save, as it does on an idle machine).
    checkpoint = consolidated(tmp_path / "last.ckpt")
    step = checkpoint["step"]
    assert step in (1, 2, 3), f"step {step}: the save under way was taken for a complete one"
    damaged = [k for k, v in checkpoint["model"].items() if not torch.all(v == float(step))]
    assert not damaged, f"the checkpoint of step {step} was damaged: {damaged}"
