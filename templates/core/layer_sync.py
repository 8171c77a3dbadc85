"""Layer synchronisation: layers whose statistics must be computed across processes."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn


class LayerSync(ABC):
    """Converts layers of a module to synchronised versions, and back."""

    @abstractmethod
    def apply(self, module: nn.Module) -> nn.Module:
        """Return the module with layers replaced by synchronised ones."""

    @abstractmethod
    def revert(self, module: nn.Module) -> nn.Module:
        """Undo ``apply``."""


class TorchSyncBatchNorm(LayerSync):
    """Replaces BatchNorm layers by torch.nn.SyncBatchNorm, which averages statistics over
    every process of the group."""

    def apply(self, module: nn.Module) -> nn.Module:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)

    def revert(self, module: nn.Module) -> nn.Module:
        converted = module
        if isinstance(module, nn.SyncBatchNorm):
            converted = _BatchNormXd(
                module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
            )
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        for name, child in module.named_children():
            converted.add_module(name, self.revert(child))
        return converted


class _BatchNormXd(nn.modules.batchnorm._BatchNorm):
    """BatchNorm for any number of dimensions, the inverse of SyncBatchNorm's conversion."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        return
