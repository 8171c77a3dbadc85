"""Stand-in for Graphcore's ``poptorch``, used only by stratgen's tests.

It is not PopTorch and compiles nothing: ``trainingModel`` returns an executor that runs the
training step PopTorch would compile (forward returning the loss, backward, optimizer step) on
the CPU, and every call stratlib makes is recorded (see ``standin_events``).

Written from PopTorch's source, poptorch 3.4.0 of Graphcore's Poplar SDK 3.4 (graphcore/poptorch
on GitHub, tag sdk/poptorch/3.4.0), which ships as a wheel inside the SDK only: __init__.py
(trainingModel, ipuHardwareIsAvailable), options.py (Options, _TrainingOptions),
_poplar_executor.py (PoplarExecutor).
"""

from __future__ import annotations

import os
from typing import Any

import standin_events
import torch


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    standin_events.record("ipuHardwareIsAvailable", num_ipus=num_ipus)
    return num_ipus <= int(os.environ.get("STANDIN_IPUS", "4"))


class _TrainingOptions:
    def __init__(self) -> None:
        self.gradient_accumulation = 1

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:
        self.gradient_accumulation = gradient_accumulation
        return self


class Options:
    def __init__(self) -> None:
        self.replication_factor = 1
        self.device_iterations = 1
        self.Training = _TrainingOptions()

    def replicationFactor(self, replication_factor: int) -> Options:
        self.replication_factor = replication_factor
        return self

    def deviceIterations(self, device_iterations: int) -> Options:
        self.device_iterations = device_iterations
        return self


class PoplarExecutor:
    """Runs the step the compiled graph would run, on the host."""

    def __init__(
        self,
        model: torch.nn.Module,
        options: Options,
        training: bool,
        poptorch_version: str,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        assert training and optimizer is not None
        self.model = model
        self.options = options
        self._optimizer = optimizer
        self.learning_rates = [group["lr"] for group in optimizer.param_groups]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        standin_events.record("compiled_step")
        output = self.model(*args, **kwargs)
        loss = output[-1] if isinstance(output, tuple) else output
        loss.backward()
        # The graph steps with the settings it was last given, not the host optimizer's.
        current = [group["lr"] for group in self._optimizer.param_groups]
        for group, lr in zip(self._optimizer.param_groups, self.learning_rates, strict=True):
            group["lr"] = lr
        self._optimizer.step()
        self._optimizer.zero_grad()
        for group, lr in zip(self._optimizer.param_groups, current, strict=True):
            group["lr"] = lr
        return output.detach() if isinstance(output, torch.Tensor) else output

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        standin_events.record("setOptimizer", lr=[group["lr"] for group in optimizer.param_groups])
        self.learning_rates = [group["lr"] for group in optimizer.param_groups]

    def copyWeightsToHost(self) -> None:
        standin_events.record("copyWeightsToHost")

    def detachFromDevice(self) -> None:
        standin_events.record("detachFromDevice")


def trainingModel(
    model: torch.nn.Module,
    options: Options | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> PoplarExecutor:
    options = options or Options()
    standin_events.record(
        "trainingModel",
        model=type(model).__name__,
        replication_factor=options.replication_factor,
        device_iterations=options.device_iterations,
        gradient_accumulation=options.Training.gradient_accumulation,
        optimizer=type(optimizer).__name__,
    )
    assert optimizer is not None
    return PoplarExecutor(model, options, True, "standin", optimizer)
