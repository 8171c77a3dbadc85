"""torch.nn.DataParallel: one process drives every device; each replica gets a slice of the
batch and gradients are summed on the first device."""

from __future__ import annotations

from typing import ClassVar

from torch import nn
from torch.nn.parallel import DataParallel
from torch.optim import Optimizer

from ..parallel import OneProcessStrategyBase


class ModuleOnItsDevice(DataParallel):
    """``DataParallel`` over no device: the module runs where it is, as torch's DataParallel
    does on a machine without GPUs. (Given no device ids on a machine with GPUs, DataParallel
    takes all of them, whatever devices the strategy was given.)"""

    def __init__(self, module: nn.Module) -> None:
        nn.Module.__init__(self)
        self.module = module
        self.device_ids = []


class DataParallelStrategyBase(OneProcessStrategyBase):
    """Single-process data parallelism: no process group, no launcher."""

    wrapper: ClassVar[str] = "dp"

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        device_ids = [d.index for d in self.parallel_devices if d.index is not None]
        if not device_ids:  # the CPU's: DataParallel would take every GPU present instead
            return ModuleOnItsDevice(module), optimizers
        return DataParallel(module, device_ids=device_ids), optimizers
