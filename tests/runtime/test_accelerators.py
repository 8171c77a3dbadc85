"""Accelerators from their specs: which devices, how many, and clear errors.

This machine has only a CPU. The CUDA and MPS cases replace torch's probes
(``torch.cuda.is_available`` / ``device_count``, ``torch.backends.mps.is_available``) by
stand-ins reporting devices, so that the accelerators' real parsing and error paths run; the
absent-device cases use the real probes.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import stratlib


@pytest.fixture
def two_cuda_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in: torch reports two CUDA devices."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize(
    ("devices", "indices"),
    [
        (1, [0]),
        (2, [0, 1]),
        ("2", [0, 1]),
        ("auto", [0, 1]),
        (-1, [0, 1]),
        ("-1", [0, 1]),
        ([1], [1]),
        ("0,1", [0, 1]),
        ((1, 0), [1, 0]),
    ],
)
def test_cuda_devices_are_parsed(
    two_cuda_devices: None, devices: object, indices: list[int]
) -> None:
    assert stratlib.CUDAAccelerator.parse_devices(devices) == indices
    assert stratlib.CUDAAccelerator.device_count() == 2
    parallel = stratlib.CUDAAccelerator.get_parallel_devices(indices)
    assert parallel == [torch.device("cuda", i) for i in indices]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (3, "devices=3 asks for more cuda devices than the 2 present"),
        ([2], r"devices=\[2\]: there is no cuda device 2 \(found 2\)"),
        ([0, 0], r"devices=\[0, 0\] names a device twice"),
        ([], r"devices=\[\] selects no device"),
        (0, "devices=0 is not allowed"),
        ("0,x", "devices='0,x' is not a list of device indices"),
    ],
)
def test_cuda_device_errors(two_cuda_devices: None, devices: object, message: str) -> None:
    with pytest.raises(stratlib.MisconfigurationError, match=message):
        stratlib.CUDAAccelerator.parse_devices(devices)


def test_cuda_error_shows_the_visible_devices(
    two_cuda_devices: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(
        stratlib.MisconfigurationError, match=r"\(found 2; CUDA_VISIBLE_DEVICES='4,5'\)"
    ):
        stratlib.CUDAAccelerator.parse_devices([3])


def test_cuda_strategy_selection_with_devices(two_cuda_devices: None) -> None:
    strategy = stratlib.get_strategy("ddp", accelerator="gpu", devices=[1, 0])
    assert strategy.parallel_devices == [torch.device("cuda", 1), torch.device("cuda", 0)]
    assert strategy.collective_backend.name == "nccl"
    assert strategy.precision_plugin.precision == "32-true"
    assert (
        stratlib.get_strategy("auto", accelerator="cuda", devices=1).__class__
        is stratlib.SingleDeviceStrategy
    )
    assert (
        stratlib.get_strategy("auto", accelerator="cuda", devices=2).__class__
        is stratlib.DDPStrategy
    )


def test_mps_devices_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert stratlib.MPSAccelerator.device_count() == 1
    assert stratlib.MPSAccelerator.parse_devices("auto") == [0]
    assert stratlib.MPSAccelerator.parse_devices(-1) == [0]
    with pytest.raises(
        stratlib.MisconfigurationError,
        match="devices=2 asks for more mps devices than the 1 present",
    ):
        stratlib.MPSAccelerator.parse_devices(2)
    with pytest.raises(
        stratlib.MisconfigurationError, match="precision='64-true': accelerator 'mps' supports"
    ):
        stratlib.get_strategy("single_device", accelerator="mps", precision="64-true")


@pytest.mark.parametrize(
    ("devices", "indices"),
    [(1, [0]), (3, [0, 1, 2]), ("2", [0, 1]), ("auto", [0]), (" 4 ", [0, 1, 2, 3])],
)
def test_cpu_devices_are_processes(devices: object, indices: list[int]) -> None:
    assert stratlib.CPUAccelerator.parse_devices(devices) == indices
    assert stratlib.CPUAccelerator.device_count() is None
    assert stratlib.CPUAccelerator.get_parallel_devices(indices) == [torch.device("cpu")] * len(
        indices
    )


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (-1, "devices=-1 .all devices. means nothing for 'cpu'"),
        ([0, 1], r"devices=\[0, 1\]: 'cpu' devices are not addressed by index"),
        ("x", "devices='x' is not understood"),
        (1.5, "devices=1.5 is not understood"),
        (True, "devices=True is not understood"),
    ],
)
def test_cpu_device_errors(devices: object, message: str) -> None:
    with pytest.raises(stratlib.MisconfigurationError, match=message):
        stratlib.CPUAccelerator.parse_devices(devices)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_absent_cuda_is_a_clear_error() -> None:
    assert not stratlib.CUDAAccelerator.is_available()
    assert stratlib.CUDAAccelerator.device_count() == 0
    with pytest.raises(stratlib.MisconfigurationError) as error:
        stratlib.get_strategy("ddp", accelerator="cuda", devices=2)
    assert (
        str(error.value)
        == "accelerator='cuda' is not available on this machine (torch.cuda.is_available() is False)"
    )


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="an MPS device is present")
def test_absent_mps_is_a_clear_error() -> None:
    with pytest.raises(
        stratlib.MisconfigurationError, match=r"^accelerator='mps' is not available on this machine"
    ):
        stratlib.get_strategy("single_device", accelerator="mps")


def test_auto_picks_the_first_available_accelerator() -> None:
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else "mps" if torch.backends.mps.is_available() else "cpu"
    )
    assert stratlib.get_strategy("single_device").accelerator.name == expected
    assert stratlib.get_strategy("auto").__class__ is stratlib.SingleDeviceStrategy


@pytest.fixture
def one_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in: torch reports one CUDA device."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_generated_tests_run_a_job_where_its_processes_have_devices(one_cuda_device: None) -> None:
    """With one GPU, a generated test of one process runs on it; one of two processes runs on
    the next accelerator the strategy supports (DDP: the CPU), and a strategy with no other
    says that the GPUs are too few instead of failing in its job."""
    from stratcore.testing import runnable_accelerator, unavailable_reason

    assert runnable_accelerator(stratlib.DDPStrategy, devices=1) == "cuda"
    assert runnable_accelerator(stratlib.DDPStrategy, devices=2) == "cpu"
    assert unavailable_reason(stratlib.DDPStrategy, devices=2) is None

    class OnlyOnCUDA(stratlib.DDPStrategy):
        accelerators = ("cuda",)

    assert runnable_accelerator(OnlyOnCUDA, devices=2) == "cuda"
    assert unavailable_reason(OnlyOnCUDA, devices=2) == (
        "devices=2 asks for more cuda devices than the 1 present"
    )


def test_data_parallel_on_the_cpu_leaves_the_gpus_alone(
    one_cuda_device: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's DataParallel given no device ids takes every GPU present; the dp strategy on the
    CPU must not, so it never asks torch for them."""
    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")

    def asked() -> None:
        raise AssertionError("DataParallel looked for GPUs")

    monkeypatch.setattr(data_parallel, "_get_available_device_type", asked)
    strategy = stratlib.get_strategy("dp", accelerator="cpu", devices=1)
    module, _ = strategy.setup_module_and_optimizers(torch.nn.Linear(2, 1), [])
    assert module(torch.ones(3, 2)).device == torch.device("cpu")
