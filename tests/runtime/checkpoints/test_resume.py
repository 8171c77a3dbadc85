"""Real models through every data-parallel strategy: training matches one process, and a run
stopped after step 2 and resumed from its checkpoint in a new job ends where the
uninterrupted run ends.

The model is a tied-embedding GPT-2 and a BatchNorm ResNet from transformers, built from
configs (``scripts/resume.py``). A resumed job is a fresh set of processes, never those of the
job that saved: the uninterrupted runs of the cases run in jobs of their own, and the resumed
runs in others. Cases of one phase that start their processes alike (as many, through the same
launcher) share a job: each case is a launch of a strategy of its own in it, as in a script
that launches several times, and reports on its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.launchers.base import rank_command
from stratcore.testing import watch

import stratlib
from tests.support import REPO

pytest.importorskip("transformers", reason="transformers is a test dependency")

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "scripts" / "resume.py"
GENERATED = REPO / "generated"
#: The processes of one data-parallel step sum their gradients in another order than one
#: process does; float32 rounding stays far below this after 4 steps.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
#: BatchNorm's running statistics: each rank (and the reference, share by share) updates them
#: from its own share, so they are compared between runs of the same layout only.
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")

#: Every test of the module runs in one pytest process, where they share the jobs.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("resume-matrix")]


@dataclass(frozen=True)
class Case:
    strategy: str
    options: dict[str, Any] = field(default_factory=dict)
    #: Processes of the uninterrupted job and of the resumed job.
    devices: tuple[int, int] = (2, 2)
    asynchronous: bool = False


CASES = {
    "ddp": Case("ddp"),
    "ddp_spawn": Case("ddp_spawn"),
    "fsdp full, tied weights in a size-wrapped model": Case("fsdp", {"auto_wrap_min_params": 300}),
    "fsdp sharded, 2 ranks resumed on 1": Case(
        "fsdp", {"auto_wrap_min_params": 300, "state_dict_type": "sharded"}, (2, 1)
    ),
    "fsdp sharded asynchronous, 1 rank resumed on 2": Case(
        "fsdp", {"state_dict_type": "sharded"}, (1, 2), asynchronous=True
    ),
    "ddp_sharded": Case("ddp_sharded"),
    "deepspeed_stage_2 full": Case("deepspeed_stage_2"),
    "deepspeed_stage_3 sharded": Case("deepspeed_stage_3", {"state_dict_type": "sharded"}),
}
#: One process standing in for two ranks, trained without interruption: what every case's
#: uninterrupted run must end with.
REFERENCE = "one process"
#: Cases whose uninterrupted job the conversion test uses too.
CONVERTED = ["fsdp sharded, 2 ranks resumed on 1", "deepspeed_stage_3 sharded"]


def _job_command(phase: str, devices: int, cases: list[dict[str, Any]]) -> list[str]:
    command = [sys.executable, str(SCRIPT), phase, "--devices", str(devices)]
    # The script's process is rank 0: it starts as the launcher starts the other ranks.
    return rank_command([*command, "--cases", json.dumps(cases), "--virtual-ranks", "2"])


def _environ() -> dict[str, str]:
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    env.pop("DS_ACCELERATOR", None)
    return env


def _spec(case: Case, checkpoint: Path, out: Path) -> dict[str, Any]:
    """A case as ``scripts/resume.py --cases`` takes it."""
    return {
        "strategy": case.strategy,
        "options": case.options,
        "async_io": case.asynchronous,
        "checkpoint": str(checkpoint),
        "out": str(out),
    }


def _run(phase: str, case: Case, devices: int, checkpoint: Path, out: Path) -> dict[str, Any]:
    """One case in a job of its own."""
    command = _job_command(phase, devices, [_spec(case, checkpoint, out)])
    process = watch.run(command, env=_environ(), cwd=out.parent)
    assert process.returncode == 0, f"{phase} {case} failed:\n{process.stderr[-4000:]}"
    return json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))


class Jobs:
    """The jobs of both phases, each run once, the first time a test needs a case of it.

    A job holds the cases of a phase with as many processes and, for more than one, the same
    launcher (one process runs any launcher's strategy). The resumed jobs start after the
    uninterrupted jobs of their cases ended.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cases = {REFERENCE: Case("single_device", devices=(1, 1)), **CASES}
        # e.g. without the deepspeed or fairscale extra: say so instead of failing the job
        self.unavailable = {
            name: testing.unavailable_reason(self._class(case), "cpu", max(case.devices))
            for name, case in self.cases.items()
        }
        self.ran: dict[tuple[str, int, str | None], subprocess.CompletedProcess[str]] = {}

    def checkpoint(self, name: str) -> Path:
        return self.folder / f"{self._slug(name)}.ckpt"

    def weights(self, phase: str, name: str) -> Path:
        return self.folder / phase / f"{self._slug(name)}.pt"

    def report(self, phase: str, name: str) -> dict[str, Any]:
        """The report of ``name``'s run in ``phase`` ('full' or 'resume'), running its job
        (and, for 'resume', the uninterrupted jobs of its job's cases) if not yet run."""
        reason = self.unavailable[name]
        if reason is not None:
            pytest.skip(reason)
        key = self._key(phase, name)
        if key not in self.ran:
            names = [
                n for n in self.cases if self.unavailable[n] is None and self._key(phase, n) == key
            ]
            if phase == "resume":
                for other in names:
                    self.report("full", other)
            (self.folder / phase).mkdir(parents=True, exist_ok=True)
            specs = [
                _spec(self.cases[n], self.checkpoint(n), self.weights(phase, n)) for n in names
            ]
            command = _job_command(phase, key[1], specs)
            self.ran[key] = watch.run(command, env=_environ(), cwd=self.folder)
        report = self.weights(phase, name).with_suffix(".json")
        process = self.ran[key]
        assert report.is_file(), f"{phase} of {name!r} failed:\n{process.stderr[-4000:]}"
        return dict(json.loads(report.read_text(encoding="utf-8")))

    def _key(self, phase: str, name: str) -> tuple[str, int, str | None]:
        """The job of ``name`` in ``phase``: its processes, and their launcher if several."""
        case = self.cases[name]
        devices = case.devices[0 if phase == "full" else 1]
        launcher = self._class(case).launcher_class.__name__ if devices > 1 else None
        return phase, devices, launcher

    @staticmethod
    def _class(case: Case) -> type[Any]:
        return stratlib.registry.REGISTRY.strategies[case.strategy].cls

    @staticmethod
    def _slug(name: str) -> str:
        return "".join(c if c.isalnum() else "_" for c in name)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    return Jobs(tmp_path_factory.mktemp("resume"))


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _assert_close(
    actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str, buffers: bool
) -> None:
    assert set(actual) == set(expected), f"{what}: other tensors than expected"
    for name, value in expected.items():
        if not buffers and name.endswith(BUFFERS):
            continue
        torch.testing.assert_close(
            actual[name].float(), value.float(), **TOLERANCE, msg=f"{what}: {name} differs"
        )


@pytest.mark.parametrize("name", list(CASES))
def test_trains_like_one_process_and_resumes_where_it_stopped(name: str, jobs: Jobs) -> None:
    first, second = CASES[name].devices
    jobs.report("full", name)
    report = jobs.report("resume", name)
    jobs.report("full", REFERENCE)

    reference = _weights(jobs.weights("full", REFERENCE))
    uninterrupted = _weights(jobs.weights("full", name))
    resumed = _weights(jobs.weights("resume", name))
    _assert_close(uninterrupted, reference, "training vs one process", buffers=False)
    _assert_close(resumed, uninterrupted, "resumed vs uninterrupted", buffers=first == second)
    assert report["world_size"] == second
    assert report["step"] == 2, "the plain entry 'step' was not updated in place"
    assert report["rng_restored"], "the RNG state was not updated in place"
    assert report["scheduler_epoch"] == 2 and report["lr"] == [0.0025], "scheduler not restored"
    assert report["scale"] == 1024.0, "the gradient scaler's scale was not restored"
    assert report["remaining"] == ["meta"], "only the entry not asked for should be returned"
    assert report["meta"] == {"note": "stopped", "lr": [0.0025]}


@pytest.mark.parametrize("name", CONVERTED)
def test_a_sharded_checkpoint_converts_into_one_file_that_loads_anywhere(
    name: str, jobs: Jobs, tmp_path: Path
) -> None:
    case = CASES[name]
    assert case.devices[0] == 2
    jobs.report("full", name)
    jobs.report("full", REFERENCE)
    reference = _weights(jobs.weights("full", REFERENCE))
    checkpoint = jobs.checkpoint(name)
    assert checkpoint.is_dir(), "a sharded checkpoint is a folder"
    single = tmp_path / "single.ckpt"
    command = [
        sys.executable,
        "-m",
        "stratcore.checkpoints.consolidate",
        str(checkpoint),
        str(single),
    ]
    converted = watch.run(command, env=_environ())
    assert converted.returncode == 0, converted.stderr

    full = torch.load(single, weights_only=True)
    assert full["step"] == 2 and full["meta"] == {"note": "stopped", "lr": [0.0025]}
    assert full["scheduler"]["last_epoch"] == 2 and full["scaler"]["scale"] == 1024.0
    parameters = {name for name in reference if not name.endswith(BUFFERS)}
    assert parameters <= set(full["model"]), "the converted module lacks parameters"
    if case.strategy.startswith("deepspeed"):
        return  # DeepSpeed's optimizer partitions are not converted (its zero_to_fp32 neither)
    # Model and optimizer at step 2: training on to step 4 in one process gives what the
    # uninterrupted run gave.
    report = _run("resume", Case("single_device"), 1, single, tmp_path / "resumed.pt")
    assert report["step"] == 2
    _assert_close(_weights(tmp_path / "resumed.pt"), reference, "converted and resumed", False)


def test_not_a_sharded_checkpoint_is_refused_with_exit_code_2(tmp_path: Path) -> None:
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    command = [sys.executable, "-m", "stratcore.checkpoints.consolidate", str(tmp_path), "out.ckpt"]
    result = watch.run(command, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "is not a sharded checkpoint" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out.ckpt").exists()


def test_world_size_is_known_before_launch_as_in_fabric(monkeypatch: pytest.MonkeyPatch) -> None:
    fabric = pytest.importorskip("lightning.fabric")
    monkeypatch.setenv("WORLD_SIZE", "7")  # left over from another job
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=2)
    oracle = fabric.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    assert strategy.world_size == oracle.world_size == 2
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}
