"""Hooks of the IPU strategy.

PopTorch compiles the module (whose forward returns the loss), the backward pass and the
optimizer step into one graph and replicates it over the IPUs, so a call of the set-up model
is a whole training step. The strategy calls these functions at its named points (see
``StrategyBase.call_hook``): ``setup`` compiles the model, and ``backward`` and
``optimizer_step`` account for the backward pass and the optimizer step that the compiled
model ran, refusing them when it did not run.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.imports import require
from torch import nn
from torch.optim import Optimizer


def _poptorch(strategy: Any) -> Any:
    require(strategy.requires, type(strategy).__name__)
    return importlib.import_module("poptorch")


def _settings(optimizer: Optimizer) -> list[dict[str, Any]]:
    """Hyperparameters of every parameter group, comparable between steps."""
    return [
        {
            k: v.tolist() if isinstance(v, torch.Tensor) else v
            for k, v in group.items()
            if k != "params"
        }
        for group in optimizer.param_groups
    ]


class CompiledModule(nn.Module):
    """The user's module (``module``) and the PopTorch model compiled from it (``compiled``).

    Calling it runs forward, backward and the optimizer step on the IPUs, with the optimizer
    settings of the host (a learning rate a scheduler changed is handed to the graph first).
    PopTorch copies the weights back to the user's module whenever its parameters are read.
    """

    def __init__(self, module: nn.Module, compiled: Any, optimizer: Optimizer) -> None:
        super().__init__()
        self.module = module
        self.compiled = compiled
        self.optimizer = optimizer
        self.calls = 0
        self._settings = _settings(optimizer)
        self._backward_due = 0
        self._step_due = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        settings = _settings(self.optimizer)
        if settings != self._settings:
            self.compiled.setOptimizer(self.optimizer)
            self._settings = settings
        output = self.compiled(*args, **kwargs)
        self.calls += 1
        self._backward_due += 1
        self._step_due += 1
        return output

    def take_backward(self) -> None:
        """Account for the backward pass the last call ran."""
        if self._backward_due == 0:
            raise MisconfigurationError(
                "on IPUs the backward pass runs inside the compiled model: call the model set up "
                "by the strategy (its forward must return the loss), then backward() once per call"
            )
        self._backward_due -= 1

    def take_optimizer_step(self, optimizer: Optimizer) -> None:
        """Account for the optimizer step the last call ran."""
        if optimizer is not self.optimizer:
            raise MisconfigurationError(
                "the IPU model was compiled with another optimizer; step the one given to setup()"
            )
        if self._step_due == 0:
            raise MisconfigurationError(
                "on IPUs the optimizer step runs inside the compiled model: call the model set up "
                "by the strategy, then optimizer_step() once per call"
            )
        self._step_due -= 1


def _compiled(strategy: Any) -> CompiledModule:
    model = strategy.model
    if not isinstance(model, CompiledModule):
        raise MisconfigurationError("set up the model with strategy.setup(module, optimizer) first")
    return model


def setup_environment(strategy: Any) -> None:
    poptorch = _poptorch(strategy)
    replicas = len(strategy.parallel_devices)
    if not poptorch.ipuHardwareIsAvailable(replicas):
        raise MisconfigurationError(
            f"devices={replicas}: PopTorch finds fewer than {replicas} IPUs here"
        )
    if strategy.autoreport_dir is not None:
        report = {"autoReport.all": "true", "autoReport.directory": str(strategy.autoreport_dir)}
        os.environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(report)


def training_options(strategy: Any) -> Any:
    """The poptorch.Options to compile with: the user's, or built from the strategy's options."""
    if strategy.training_opts is not None:
        return strategy.training_opts
    options = _poptorch(strategy).Options()
    options.replicationFactor(len(strategy.parallel_devices))
    options.deviceIterations(strategy.device_iterations)
    options.Training.gradientAccumulation(strategy.gradient_accumulation)
    return options


def setup(
    strategy: Any, module: nn.Module, optimizers: list[Optimizer]
) -> tuple[nn.Module, list[Optimizer]]:
    if len(optimizers) != 1:
        raise MisconfigurationError(
            f"the IPU strategy compiles one optimizer into the training graph; {len(optimizers)} were given"
        )
    poptorch = _poptorch(strategy)
    compiled = poptorch.trainingModel(
        module, options=training_options(strategy), optimizer=optimizers[0]
    )
    return CompiledModule(module, compiled, optimizers[0]), optimizers


def backward(strategy: Any, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    _compiled(strategy).take_backward()


def optimizer_step(strategy: Any, optimizer: Optimizer, **kwargs: Any) -> None:
    _compiled(strategy).take_optimizer_step(optimizer)


def teardown(strategy: Any) -> None:
    model = strategy.model
    if isinstance(model, CompiledModule) and model.calls:
        model.compiled.copyWeightsToHost()
        model.compiled.detachFromDevice()
