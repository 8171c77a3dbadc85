"""The Lightning Trainer glue stratgen would generate for 'acme' (lightning.pytorch)."""

from __future__ import annotations

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry
from stratcore.lightning.accelerators import AcceleratorAdapter
from stratcore.lightning.ddp import DDPAdapter
from stratcore.lightning.environments import EnvironmentAdapter
from stratcore.lightning.strategies import register

import acme


class AcmeAccelerator(AcceleratorAdapter, Accelerator):
    spec = acme.AcmeAccelerator


class AcmeEnvironment(EnvironmentAdapter, ClusterEnvironment):
    spec = acme.AcmeEnvironment


class AcmeParallelStrategy(DDPAdapter, DDPStrategy):
    spec = acme.AcmeParallelStrategy
    environments = (AcmeEnvironment,)


register(
    AcceleratorRegistry,
    StrategyRegistry,
    accelerators=[AcmeAccelerator],
    strategies=[
        ("acme_parallel", AcmeParallelStrategy, {}),
        ("acme_parallel_spawn", AcmeParallelStrategy, {"start_method": "spawn"}),
        (
            "acme_parallel_find_unused_parameters_true",
            AcmeParallelStrategy,
            {"find_unused_parameters": True},
        ),
    ],
)
