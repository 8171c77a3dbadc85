"""IPU support: specs/ipu.yaml with its hooks (specs/hooks/ipu.py) and core/ipu.py.

PopTorch needs Graphcore's SDK and IPUs. The hooks run here against a stand-in ``poptorch``
(tests/hardware/standins) whose "compiled" model performs, on the CPU, the training step
PopTorch would compile, and which records each call. It is not PopTorch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import stratlib
import stratlib.hooks.ipu
from stratlib import IPUAccelerator, IPUPrecisionPlugin, IPUStrategy

from .support import run_script

SCRIPT = """
import json
import sys

import torch
from torch import nn

import stratlib
from stratcore import testing
from stratcore.exceptions import MisconfigurationError

LEARNING_RATES = [0.1, 0.1, 0.05, 0.05]


class WithLoss(nn.Module):
    # PopTorch's rule: in training, the forward pass returns the loss.
    def __init__(self):
        super().__init__()
        self.net = testing.reference_model()

    def forward(self, x, y):
        return nn.functional.mse_loss(self.net(x), y)


def reference():
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATES[0])
    x, y = testing.reference_batch()
    for lr in LEARNING_RATES:
        optimizer.param_groups[0]["lr"] = lr
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.tolist() for p in model.state_dict().values()]


def refused(call):
    try:
        call()
    except MisconfigurationError as exc:
        return str(exc)
    return None


if __name__ == "__main__":
    strategy = stratlib.get_strategy("ipu", accelerator="ipu", devices=int(sys.argv[1]), device_iterations=2)
    module = WithLoss()
    optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATES[0])
    model, optimizer = strategy.setup(module, optimizer)
    errors = {"backward_first": refused(lambda: strategy.backward(torch.tensor(1.0)))}
    x, y = testing.reference_batch()
    for lr in LEARNING_RATES:
        optimizer.param_groups[0]["lr"] = lr  # as a scheduler would
        loss = model(x, y)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
    errors["second_backward"] = refused(lambda: strategy.backward(loss))
    errors["other_optimizer"] = refused(lambda: strategy.optimizer_step(torch.optim.SGD(module.parameters(), lr=1.0)))
    errors["clip"] = refused(lambda: strategy.clip_gradients(model, optimizer, 1.0))
    errors["bf16"] = refused(lambda: stratlib.get_strategy("ipu", accelerator="ipu", precision="bf16-mixed"))
    state = strategy.get_module_state_dict(model)
    strategy.teardown()
    result = {
        "params": [t.tolist() for t in state.values()],
        "reference": reference(),
        "keys": list(state),
        "model_type": type(model).__name__,
        "precision": type(strategy.precision_plugin).__name__,
        "errors": errors,
    }
    print("RESULT " + json.dumps(result))
"""


def test_ipu_hooks_on_a_poptorch_stand_in(tmp_path: Path) -> None:
    """get_strategy('ipu', devices=2): the hooks check that two IPUs exist, compile the model
    with its optimizer and the options from the spec (2 replicas, 2 device iterations); each
    call of the set-up model is one compiled step, changed learning rates reach the graph
    before the call, backward/optimizer_step are accounted against the compiled model and
    refused without it, and teardown copies the weights back and releases the IPUs."""
    run = run_script(tmp_path, SCRIPT, standins=("poptorch",), args=("2",)).check()
    result = run.result
    for got, expected in zip(result["params"], result["reference"], strict=True):
        assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=1e-6)
    assert result["keys"] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    assert result["model_type"] == "CompiledModule"
    assert result["precision"] == "IPUPrecisionPlugin"
    # specs/ipu.yaml: IPUs run float32 or float16 alone.
    assert result["errors"]["bf16"] == (
        "precision='bf16-mixed': accelerator 'ipu' supports 32-true, 16-true"
    )
    events = [e["event"] for e in run.events]
    assert events == [
        "ipuHardwareIsAvailable",
        "trainingModel",
        *["compiled_step"] * 2,
        "setOptimizer",
        *["compiled_step"] * 2,
        "copyWeightsToHost",
        "detachFromDevice",
    ]
    (probe,) = run.named("ipuHardwareIsAvailable")
    assert probe["num_ipus"] == 2
    (compiled,) = run.named("trainingModel")
    assert compiled["model"] == "WithLoss"
    assert compiled["optimizer"] == "SGD"
    assert (
        compiled["replication_factor"],
        compiled["device_iterations"],
        compiled["gradient_accumulation"],
    ) == (2, 2, 1)
    (pushed,) = run.named("setOptimizer")
    assert pushed["lr"] == [0.05]
    errors = result["errors"]
    assert "backward pass runs inside the compiled model" in errors["backward_first"]
    assert "backward pass runs inside the compiled model" in errors["second_backward"]
    assert "compiled with another optimizer" in errors["other_optimizer"]
    assert "cannot be clipped from the host" in errors["clip"]


def test_ipu_refuses_more_ipus_than_present(tmp_path: Path) -> None:
    run = run_script(tmp_path, SCRIPT, standins=("poptorch",), args=("8",))
    assert run.process.returncode != 0
    assert "devices=8: PopTorch finds fewer than 8 IPUs here" in run.process.stderr
    assert run.named("trainingModel") == []


def test_ipu_precision_plugin_conversions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core mixin's conversions and refusals need no IPU; poptorch's requirement is lifted
    for this test only."""
    monkeypatch.setattr(IPUPrecisionPlugin, "requires", ())
    plugin = IPUPrecisionPlugin("16-true")
    module = plugin.convert_module(torch.nn.Linear(2, 2))
    assert module.weight.dtype is torch.float16
    assert [
        t.dtype for t in plugin.convert_input((torch.ones(1), torch.ones(1, dtype=torch.int64)))
    ] == [
        torch.float16,
        torch.int64,
    ]
    with pytest.raises(stratlib.MisconfigurationError, match="cannot be clipped from the host"):
        plugin.clip_gradients([], torch.optim.SGD(module.parameters()), 1.0)
    with pytest.raises(stratlib.MisconfigurationError, match="inside the compiled model"):
        plugin.backward(torch.tensor(1.0))
    assert (
        IPUPrecisionPlugin("32-true").convert_module(torch.nn.Linear(2, 2)).weight.dtype
        is torch.float32
    )


def test_ipu_facts_without_poptorch() -> None:
    assert IPUStrategy.hooks is stratlib.hooks.ipu
    assert IPUAccelerator.auto_devices == 4
    assert not IPUAccelerator.is_available()
    with pytest.raises(
        stratlib.MissingDependencyError,
        match=r"'poptorch'.*poptorch wheel of Graphcore's Poplar SDK",
    ):
        stratlib.get_strategy("ipu", accelerator="ipu", devices=4)
    with pytest.raises(stratlib.MisconfigurationError, match="IPUStrategy runs on ipu"):
        stratlib.get_strategy("ipu", accelerator="cpu")
