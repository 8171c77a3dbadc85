"""Real models through every data-parallel strategy: training matches one process, and a run
stopped after step 2 and resumed from its checkpoint in a new job ends where the
uninterrupted run ends.

The model is a tied-embedding GPT-2 and a BatchNorm ResNet from transformers, built from
configs (``scripts/resume.py``). Every job is a fresh set of processes, as a resumed job is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing, watch

import stratlib

pytest.importorskip("transformers", reason="transformers is a test dependency")

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "scripts" / "resume.py"
GENERATED = HERE.parents[1] / "generated"
#: The processes of one data-parallel step sum their gradients in another order than one
#: process does; float32 rounding stays far below this after 4 steps.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
#: BatchNorm's running statistics: each rank (and the reference, share by share) updates them
#: from its own share, so they are compared between runs of the same layout only.
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")

pytestmark = pytest.mark.slow


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


def _run(phase: str, case: Case, devices: int, checkpoint: Path, out: Path) -> dict[str, Any]:
    command = [sys.executable, str(SCRIPT), phase, case.strategy, "--devices", str(devices)]
    command += ["--options", json.dumps(case.options), "--checkpoint", str(checkpoint)]
    command += ["--out", str(out), "--virtual-ranks", "2"]
    if case.asynchronous:
        command.append("--async-io")
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    env.pop("DS_ACCELERATOR", None)
    process = watch.run(command, env=env, cwd=out.parent)
    assert process.returncode == 0, f"{phase} {case} failed:\n{process.stderr[-4000:]}"
    return json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))


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


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """One process standing in for two ranks, trained without interruption."""
    folder = tmp_path_factory.mktemp("reference")
    _run("full", Case("single_device"), 1, folder / "unused.ckpt", folder / "final.pt")
    return _weights(folder / "final.pt")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """The uninterrupted job of a case (it saves its checkpoint after step 2): the checkpoint
    and the final weights. A case's job runs once for every test that needs it (in one pytest
    process: the tests that share one are in one xdist group)."""
    done: dict[str, tuple[Path, Path]] = {}

    def run(name: str) -> tuple[Path, Path]:
        if name not in done:
            case = CASES[name]
            # e.g. without the deepspeed or fairscale extra: say so instead of failing the job
            cls = stratlib.registry.REGISTRY.strategies[case.strategy].cls
            reason = testing.unavailable_reason(cls, "cpu", case.devices[0])
            if reason is not None:
                pytest.skip(reason)
            folder = tmp_path_factory.mktemp("full")
            checkpoint, uninterrupted = folder / "step2.ckpt", folder / "uninterrupted.pt"
            _run("full", case, case.devices[0], checkpoint, uninterrupted)
            done[name] = checkpoint, uninterrupted
        return done[name]

    return run


#: Cases whose uninterrupted job the conversion test uses too.
CONVERTED = ["fsdp sharded, 2 ranks resumed on 1", "deepspeed_stage_3 sharded"]


@pytest.mark.parametrize(
    "name",
    [
        (
            pytest.param(name, marks=[pytest.mark.xdist_group("resume-converted")])
            if name in CONVERTED
            else name
        )
        for name in CASES
    ],
)
def test_trains_like_one_process_and_resumes_where_it_stopped(
    name: str,
    full_run: Callable[[str], tuple[Path, Path]],
    reference: dict[str, torch.Tensor],
    tmp_path: Path,
) -> None:
    case = CASES[name]
    resumed = tmp_path / "resumed.pt"
    first, second = case.devices

    checkpoint, uninterrupted = full_run(name)
    report = _run("resume", case, second, checkpoint, resumed)

    _assert_close(_weights(uninterrupted), reference, "training vs one process", buffers=False)
    same_layout = first == second
    _assert_close(
        _weights(resumed), _weights(uninterrupted), "resumed vs uninterrupted", same_layout
    )
    assert report["world_size"] == second
    assert report["step"] == 2, "the plain entry 'step' was not updated in place"
    assert report["rng_restored"], "the RNG state was not updated in place"
    assert report["scheduler_epoch"] == 2 and report["lr"] == [0.0025], "scheduler not restored"
    assert report["scale"] == 1024.0, "the gradient scaler's scale was not restored"
    assert report["remaining"] == ["meta"], "only the entry not asked for should be returned"
    assert report["meta"] == {"note": "stopped", "lr": [0.0025]}


@pytest.mark.xdist_group("resume-converted")
@pytest.mark.parametrize("name", CONVERTED)
def test_a_sharded_checkpoint_converts_into_one_file_that_loads_anywhere(
    name: str,
    full_run: Callable[[str], tuple[Path, Path]],
    reference: dict[str, torch.Tensor],
    tmp_path: Path,
) -> None:
    case = CASES[name]
    assert case.devices[0] == 2
    checkpoint, _ = full_run(name)
    assert checkpoint.is_dir(), "a sharded checkpoint is a folder"
    single = tmp_path / "single.ckpt"
    env = testing.clean_environ({"PYTHONPATH": str(GENERATED)})
    command = [sys.executable, "-m", "stratcore.consolidate", str(checkpoint), str(single)]
    converted = watch.run(command, env=env)
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
    command = [sys.executable, "-m", "stratcore.consolidate", str(tmp_path), "out.ckpt"]
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
