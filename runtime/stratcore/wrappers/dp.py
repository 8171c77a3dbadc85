"""torch.nn.DataParallel: one process drives every device; each replica gets a slice of the
batch and gradients are summed on the first device."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.parallel import DataParallel
from torch.optim import Optimizer

from ..parallel import ParallelStrategyBase


class DataParallelStrategyBase(ParallelStrategyBase):
    """Single-process data parallelism: no process group, no launcher."""

    wrapper: ClassVar[str] = "dp"

    @property
    def num_processes(self) -> int:
        return 1

    @property
    def root_device(self) -> torch.device:
        return self.parallel_devices[0]

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def configure_ranks(self) -> None:
        """Nothing to tell the environment: there is one process."""

    def setup_distributed(self) -> None:
        """DataParallel needs no process group."""

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        device_ids = [d.index for d in self.parallel_devices if d.index is not None]
        return DataParallel(module, device_ids=device_ids or None), optimizers

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": 1, "rank": 0}
