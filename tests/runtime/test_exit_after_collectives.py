"""Processes end cleanly after asynchronous gloo collectives, job after job, strategy by strategy.

A process group lives as long as something holds it, ``destroy_process_group`` or not: held
past stratlib's exit handler, its gloo threads lived on into interpreter shutdown, where a rank
now and then died with SIGABRT after a successful run. What held them: ``torch.distributed.nn.
functional`` (DDP, imported after the group exists), DTensor's caches (FSDP2, ModelParallel),
DeepSpeed's own references to its groups, its backend's default arguments and the models its
ZeRO stage 3 keeps, and the exception that ended a script; where a later launch reuses the
group, the defaults of modules it imports after the group exists. The scenario script forks real
2-rank gloo jobs (see its documentation); a rank whose group is still alive after stratlib's
exit handler fails with exit code 3, an abort shows as -6.
"""

from __future__ import annotations

import json
import sys

import pytest
from stratcore.testing import watch

from .support import ROOT, SCRIPTS, script_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks, and reads /proc"),
]


#: The leftover group fails its rank deterministically (exit code 3) in every job; the abort it
#: caused came now and then, which more jobs would catch more often.
DDP_JOBS = 12

#: One job of each fails deterministically as well; two show that a job's exit leaves nothing
#: that breaks the next one's.
JOBS = 2
STRATEGIES = [
    "fsdp",
    "model_parallel",
    "ddp_sharded",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_3",
    # later launches reusing the group of an earlier one, imported after it existed
    "ddp,ddp_sharded",
    "ddp,deepspeed_stage_2",
]


def assert_clean_exits(runs: int, strategies: list[str]) -> None:
    """``runs`` jobs of each strategy: every rank exits with code 0 (1 where it raises)."""
    process = watch.run(
        [sys.executable, str(SCRIPTS / "exit_after_collectives.py"), str(runs), *strategies],
        what=f"{runs} jobs of {', '.join(strategies)}",
        env=script_env(PYTHONPATH=str(ROOT / "tests" / "support" / "job_modules")),
    )
    assert process.returncode == 0, process.stderr[-3000:]
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, process.stdout[-3000:] + process.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["runs"] == {strategy: runs for strategy in strategies}
    assert result["failures"] == [], process.stderr[-3000:]


def test_ddp_jobs_end_without_an_abort_or_a_leftover_group() -> None:
    assert_clean_exits(DDP_JOBS, ["ddp"])


def test_sharding_strategies_leave_no_group_behind() -> None:
    pytest.importorskip("deepspeed")
    pytest.importorskip("fairscale")
    assert_clean_exits(JOBS, STRATEGIES)


def test_scripts_that_raise_leave_no_group_behind() -> None:
    """The exception that ended a script holds, in its traceback, the frames that held the
    strategy and the model: the exit handler lets go of it before the release."""
    pytest.importorskip("deepspeed")
    assert_clean_exits(1, ["ddp+raise", "fsdp+raise", "deepspeed_stage_3+raise"])
