"""Every precision trains with DDP on 2 ranks, under the names users type.

``scripts/precisions.py`` launches DDP six times in one script (the ranks it starts take part
in every launch): '32', '64', '16', 'bf16', '16-true' and 'bf16-true'.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from stratcore import testing
from stratcore.precision.base import canonical_precision
from torch import nn

import stratlib

from .support import finish, python, read_result, start

STEPS = 4


#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("precisions")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("precisions")
    outcomes = finish([start(python("precisions.py", "--steps", str(STEPS), "--out", str(folder)))])
    assert outcomes[0][0] == 0, outcomes[0][2][-4000:]
    return read_result(folder)


EXPECTED = {
    # typed: (precision, plugin, parameter dtype, dtype of a Linear layer's output)
    "32": ("32-true", "PrecisionPlugin", "torch.float32", "torch.float32"),
    "64": ("64-true", "DoublePrecisionPlugin", "torch.float64", "torch.float64"),
    "16": ("16-mixed", "NativeMixedPrecisionPlugin", "torch.float32", "torch.float16"),
    "bf16": ("bf16-mixed", "NativeMixedPrecisionPlugin", "torch.float32", "torch.bfloat16"),
    "16-true": ("16-true", "HalfPrecisionPlugin", "torch.float16", "torch.float16"),
    "bf16-true": ("bf16-true", "HalfPrecisionPlugin", "torch.bfloat16", "torch.bfloat16"),
}


@pytest.mark.parametrize("typed", list(EXPECTED))
def test_ddp_trains_in_every_precision(reports: dict, typed: str) -> None:
    report = reports[typed]
    precision, plugin, param_dtype, activation_dtype = EXPECTED[typed]
    assert report["world_size"] == 2
    assert (report["precision"], report["plugin"]) == (precision, plugin)
    assert report["param_dtype"] == param_dtype
    assert (
        report["activation_dtype"] == activation_dtype
    ), "the forward pass did not run in this precision"
    assert report["scaler"] == "NoneType", "the CPU needs no gradient scaler"
    losses = report["losses"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses


def test_64_true_equals_the_float64_single_process_reference(reports: dict) -> None:
    reference = testing.reference_parameters(STEPS, dtype=torch.float64)
    testing.assert_parameters_close(reports["64"]["params"], reference, atol=1e-12)


def test_32_true_equals_the_float32_single_process_reference(reports: dict) -> None:
    testing.assert_parameters_close(
        reports["32"]["params"], testing.reference_parameters(STEPS), atol=1e-5
    )


@pytest.mark.parametrize("typed", ["16", "bf16", "16-true", "bf16-true"])
def test_reduced_precisions_stay_near_the_reference(reports: dict, typed: str) -> None:
    tolerance = {"16": 1e-2, "bf16": 3e-2, "16-true": 1e-2, "bf16-true": 5e-2}[typed]
    testing.assert_parameters_close(
        reports[typed]["params"], testing.reference_parameters(STEPS), atol=tolerance
    )


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("32", "32-true"),
        (32, "32-true"),
        ("64", "64-true"),
        (64, "64-true"),
        ("16", "16-mixed"),
        (16, "16-mixed"),
        ("bf16", "bf16-mixed"),
        ("BF16-Mixed", "bf16-mixed"),
        ("16-true", "16-true"),
        ("bf16-true", "bf16-true"),
    ],
)
def test_precision_names_users_type(typed: object, canonical: str) -> None:
    assert canonical_precision(typed) == canonical
    strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=2, precision=typed)
    assert strategy.precision_plugin.precision == canonical


def _train_steps(plugin: stratlib.PrecisionBase, steps: int = 3) -> tuple[list[float], nn.Module]:
    strategy = stratlib.SingleDeviceStrategy(
        device="cpu", accelerator=stratlib.CPUAccelerator(), precision_plugin=plugin
    )
    model = testing.reference_model()
    model, optimizer = strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = testing.reference_batch()
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        losses.append(loss.item())
    strategy.teardown()
    return losses, model


def test_16_mixed_scales_the_loss_where_the_device_needs_it() -> None:
    """CUDA needs a GradScaler for float16; the CPU does not. The CPU stands in for a device
    that needs one here: torch.amp.GradScaler('cpu') runs the same scale / unscale / skip-on-inf
    / update logic."""
    plugin = stratlib.NativeMixedPrecisionPlugin("16-mixed", device_type="cpu")
    plugin.connect(torch.device("cpu"), needs_grad_scaler=True)
    assert isinstance(plugin.scaler, torch.amp.GradScaler)
    scale = plugin.scaler.get_scale()
    scaled = plugin.pre_backward(torch.tensor(2.0))
    assert scaled.item() == 2.0 * scale
    losses, _ = _train_steps(plugin)
    assert losses[-1] < losses[0]
    assert plugin.state_dict()["scaler"]["scale"] == plugin.scaler.get_scale()

    unscaled = stratlib.NativeMixedPrecisionPlugin("bf16-mixed", device_type="cpu")
    unscaled.connect(torch.device("cpu"), needs_grad_scaler=True)
    assert unscaled.scaler is None, "bfloat16 has float32's range: no scaling"
    cpu = stratlib.NativeMixedPrecisionPlugin("16-mixed", device_type="cpu")
    cpu.connect(torch.device("cpu"), needs_grad_scaler=stratlib.CPUAccelerator.grad_scaler)
    assert cpu.scaler is None
    assert stratlib.CUDAAccelerator.grad_scaler is True


def test_gradient_scaler_skips_a_step_with_infinite_gradients() -> None:
    plugin = stratlib.NativeMixedPrecisionPlugin("16-mixed", device_type="cpu")
    plugin.connect(torch.device("cpu"), needs_grad_scaler=True)
    parameter = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    loss = (parameter * torch.tensor([float("inf"), 1.0])).sum()
    plugin.backward(plugin.pre_backward(loss))
    scale = plugin.scaler.get_scale()
    plugin.optimizer_step(optimizer)
    assert torch.equal(
        parameter.detach(), torch.ones(2)
    ), "a step with inf gradients must be skipped"
    assert plugin.scaler.get_scale() < scale, "the scale must back off after an overflow"


def test_apex_points_to_16_mixed() -> None:
    with pytest.raises(stratlib.MisconfigurationError, match="precision='16-mixed'"):
        stratlib.ApexMixedPrecisionPlugin("16-mixed")


def test_unknown_precision_names_what_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(
        stratlib.MisconfigurationError,
        match=r"^precision='8-mixed' is not supported; use one of 64-true",
    ):
        stratlib.get_strategy("ddp", accelerator="cpu", devices=2, precision="8-mixed")
