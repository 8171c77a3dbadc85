"""Intel XPUs, Ascend NPUs, Cambricon MLUs, Moore Threads GPUs (MUSA), AMD GPUs (ROCm) and the
generic torch.accelerator device, defined by their specs alone.

None of this hardware exists here. The first part trains each device's DDP strategy on two
processes against stand-ins of the vendor's package or of torch's device build
(tests/hardware/standins), whose calls are recorded: every process selects its device through
the vendor's function, the process group runs under the backend's torch name, and the device
caches are released at teardown. The PrivateUse1 devices (NPU, MLU, MUSA, and the generic
device torch finds) are the project's test device there, so their parameters live on the
device; XPU's and ROCm's processes get the CPU. The rest checks in this process, with torch's device modules
answering as on such a machine (monkeypatched), what the spec language adds for these devices:
precisions behind a probe, a device type found at run time and its backend from torch's map, a
build marker, DeepSpeed's accelerator name, SyncBatchNorm, and a Lightning Trainer built from
the names. Where tensors live and what the devices compute only the hardware can show.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.layer_sync import TorchSyncBatchNorm
from stratcore.testing import assert_parameters_close, reference_parameters

import stratlib
from stratlib import (
    CPUAccelerator,
    GenericAccelerator,
    NPUAccelerator,
    ROCmAccelerator,
    XPUAccelerator,
)

from .support import run_script

# --- two processes on the stand-ins --------------------------------------------------------------

TRAIN = """
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import standin_events
import stratlib
from stratcore import testing


def train(strategy, steps):
    standin_events.record("rank", rank=strategy.global_rank, backend=dist.get_backend())
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = testing.reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    xs, ys = testing.shard(x, rank, world), testing.shard(y, rank, world)
    for _ in range(steps):
        strategy.backward(nn.functional.mse_loss(model(xs), ys))
        strategy.optimizer_step(optimizer)
    return {
        "device": next(model.parameters()).device.type,
        "params": [t.tolist() for t in strategy.get_module_state_dict(model).values()],
        "world_size": world,
        "mean": strategy.reduce(torch.tensor(float(rank + 1)), reduce_op="mean").item(),
    }


if __name__ == "__main__":
    strategy = stratlib.get_strategy(sys.argv[1], devices=2, precision="32-true")
    result = strategy.launch(train, 3)
    result["accelerator"] = strategy.accelerator.name
    if strategy.is_global_zero:
        print("RESULT " + json.dumps(result))
"""

#: Strategy -> (stand-in packages, the environment of the processes, the process group's
#: backend, the call that selects each process's device where a stand-in records it, the type of
#: the device the parameters live on).
DEVICES: dict[str, tuple[tuple[str, ...], dict[str, str], str, str | None, str]] = {
    "xpu_ddp": (
        (),
        {"STANDIN_ON_CPU": "xpu", "STANDIN_TORCH": "xpu,xccl"},
        "xccl",
        "set_device",
        "cpu",
    ),
    "npu_ddp": (("torch_npu",), {}, "hccl", "set_device", "npu"),
    "mlu_ddp": (("torch_mlu",), {}, "cncl", "set_device", "mlu"),
    "musa_ddp": (("torch_musa",), {}, "mccl", "set_device", "musa"),
    # The test device as torch finds it at start (backend autoload), with its own backend.
    "generic_ddp": ((), {"STRATGEN_TESTDEVICE": "testdev"}, "testccl", None, "testdev"),
    # A ROCm build's torch.cuda cannot be stood in for on a CPU build: the accelerator is made
    # present with 2 devices (so nothing selects one), the build is a ROCm one, and 'nccl' runs.
    "rocm_ddp": (
        (),
        {"STANDIN_ON_CPU": "rocm:2", "STANDIN_TORCH": "hip,nccl"},
        "nccl",
        None,
        "cpu",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(DEVICES))
def test_ddp_of_the_device_trains_on_two_processes_through_its_software(
    strategy: str, tmp_path: Path
) -> None:
    packages, environ, backend, select, device_type = DEVICES[strategy]
    run = run_script(
        tmp_path, TRAIN, standins=packages, args=(strategy,), env=environ, devices=True
    ).check()
    assert run.result["accelerator"] == strategy.removesuffix("_ddp")
    assert run.result["device"] == device_type
    assert run.result["world_size"] == 2
    assert_parameters_close(run.result["params"], reference_parameters(steps=3))
    assert run.result["mean"] == 1.5  # emulated where the backend has no mean
    ranks = run.named("rank")
    assert sorted(e["rank"] for e in ranks) == [0, 1]
    assert {e["backend"] for e in ranks} == {backend}
    for pid in {e["pid"] for e in ranks}:
        if select is not None:
            assert len(run.named(select, pid=pid)) == 1, run.events
            assert len(run.named("empty_cache", pid=pid)) == 1, run.events


# --- precisions behind a probe -------------------------------------------------------------------


@pytest.fixture
def two_xpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """torch.xpu answering as on a machine with two Intel GPUs; bfloat16 as the dict says."""
    answers = {"bf16": True}
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)
    monkeypatch.setattr(
        torch.xpu, "is_bf16_supported", lambda including_emulation=True: answers["bf16"]
    )
    return answers


def test_bfloat16_runs_only_where_the_devices_probe_says_so(two_xpus: dict[str, bool]) -> None:
    assert stratlib.get_strategy(
        "xpu_single", devices=1, precision="bf16-mixed"
    ).precision_plugin.precision
    two_xpus["bf16"] = False
    with pytest.raises(MisconfigurationError, match=r"torch\.xpu\.is_bf16_supported\(\)"):
        stratlib.get_strategy("xpu_single", devices=1, precision="bf16-mixed")
    with pytest.raises(MisconfigurationError, match="'bf16-true'"):
        stratlib.get_strategy("xpu_ddp", devices=2, precision="bf16-true")
    built = stratlib.get_strategy("xpu_ddp", devices=2, precision="16-mixed")
    assert built.precision_plugin.precision == "16-mixed"
    assert XPUAccelerator.available_precisions() == ("32-true", "16-mixed", "16-true")


def test_probes_ask_nothing_where_the_device_is_absent() -> None:
    assert not NPUAccelerator.is_available()
    assert NPUAccelerator.precision_refused("bf16-mixed") is None  # torch_npu is not imported
    assert NPUAccelerator.available_precisions() == NPUAccelerator.supported_precisions


# --- the generic device ----------------------------------------------------------------------------


def test_the_generic_device_is_whatever_torch_accelerator_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("xpu"))
    assert GenericAccelerator.device_type == "xpu"
    assert GenericAccelerator.get_parallel_devices([0, 1]) == [
        torch.device("xpu", 0),
        torch.device("xpu", 1),
    ]
    backend = GenericAccelerator.collective_backend()
    assert backend.process_group_name == "xccl"  # torch's map: xpu -> xccl
    assert "mean" not in backend.reduce_ops  # what the spec relies on from any backend
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    assert GenericAccelerator.collective_backend().process_group_name == "nccl"


def test_the_generic_device_names_torchs_map_where_it_has_no_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("meta"))
    with pytest.raises(MisconfigurationError, match=r"maps none to 'meta'.*process_group_backend"):
        GenericAccelerator.collective_backend()


def test_without_an_accelerator_the_generic_device_is_absent() -> None:
    assert torch.accelerator.current_accelerator() is None
    assert not GenericAccelerator.is_available()
    with pytest.raises(MisconfigurationError, match="accelerator='generic' is not available"):
        GenericAccelerator.check_available()


# --- a build marker --------------------------------------------------------------------------------


def test_rocm_is_present_only_on_a_rocm_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert torch.version.hip is None
    assert not ROCmAccelerator.is_available()
    with pytest.raises(
        MisconfigurationError, match=r"accelerator='rocm'.*torch\.version\.hip is not set"
    ):
        ROCmAccelerator.check_available()
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    assert ROCmAccelerator.is_available() and ROCmAccelerator.device_count() == 2
    assert ROCmAccelerator.device_type == "cuda"
    assert ROCmAccelerator.collective_backend().process_group_name == "nccl"


# --- backends that share torch's name ------------------------------------------------------------


def test_torchs_name_for_a_devices_backend_means_that_devices_backend() -> None:
    """Habana's and Huawei's HCCL are both 'hccl' to torch: process_group_backend='hccl' keeps
    each device's own (with its reductions and registration), and other names are looked up."""
    npu = stratlib.DDPStrategy(accelerator=NPUAccelerator(), process_group_backend="hccl")
    assert npu.collective_backend is stratlib.backends.ASCEND_HCCL
    assert npu.collective_backend.registered_by == "torch_npu"
    hpu = stratlib.DDPStrategy(accelerator=stratlib.HPUAccelerator(), process_group_backend="hccl")
    assert hpu.collective_backend is stratlib.backends.HCCL
    gloo = stratlib.DDPStrategy(accelerator=NPUAccelerator(), process_group_backend="gloo")
    assert gloo.collective_backend is stratlib.backends.GLOO


# --- DeepSpeed and SyncBatchNorm ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator", "name"),
    [
        (XPUAccelerator, "xpu"),
        (NPUAccelerator, "npu"),
        (ROCmAccelerator, "cuda"),
        (CPUAccelerator, "cpu"),
    ],
)
def test_deepspeed_selects_the_accelerator_class_the_device_spec_names(
    accelerator: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deepspeed")
    # Set, then removed: monkeypatch then removes what the strategy sets when the test ends
    # (a variable it only removes, absent, it leaves as the test leaves it).
    monkeypatch.setenv("DS_ACCELERATOR", "")
    monkeypatch.delenv("DS_ACCELERATOR")
    stratlib.DeepSpeedStrategy(accelerator=accelerator()).select_deepspeed_accelerator()
    assert os.environ["DS_ACCELERATOR"] == name


def test_sync_batchnorm_follows_each_accelerators_spec() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    sync = TorchSyncBatchNorm()
    for accelerator in (XPUAccelerator(), NPUAccelerator(), ROCmAccelerator()):
        sync.check_supported(module, torch.device("cpu"), 2, accelerator)
    with pytest.raises(MisconfigurationError, match="trains on cpu \\(accelerator 'cpu'\\)"):
        sync.check_supported(module, torch.device("cpu"), 2, CPUAccelerator())


# --- Lightning -----------------------------------------------------------------------------------


def test_a_lightning_trainer_takes_the_xpu_plugins_by_name(two_xpus: dict[str, bool]) -> None:
    """`import stratlib.lightning.pytorch`, then `Trainer(accelerator="xpu",
    strategy="xpu_ddp")`, with torch.xpu answering as on a machine with two Intel GPUs (the
    stand-in runs of tests/hardware/test_generated_on_standins.py fit such Trainers)."""
    pl = pytest.importorskip("lightning.pytorch")
    import stratlib.lightning.pytorch as plugins

    trainer = pl.Trainer(accelerator="xpu", strategy="xpu_ddp", devices=2, logger=False)
    assert type(trainer.strategy) is plugins.XPUDDPStrategy
    assert type(trainer.accelerator) is plugins.XPUAccelerator
    assert trainer.strategy.parallel_devices == [torch.device("xpu", i) for i in (0, 1)]
    assert trainer.strategy._get_process_group_backend() == "xccl"
