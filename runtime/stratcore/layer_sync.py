"""Layer synchronisation: layers whose statistics must be computed across processes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch
from torch import nn

from .exceptions import MisconfigurationError

if TYPE_CHECKING:
    from .accelerator import Accelerator


class LayerSync(ABC):
    """Converts layers of a module to synchronised versions, and back."""

    @abstractmethod
    def apply(self, module: nn.Module) -> nn.Module:
        """Return the module with layers replaced by synchronised ones."""

    @abstractmethod
    def revert(self, module: nn.Module) -> nn.Module:
        """Undo ``apply``."""

    def check_supported(
        self,
        module: nn.Module,
        device: torch.device,
        world_size: int,
        accelerator: Accelerator | None = None,
    ) -> None:
        """Raise MisconfigurationError if ``module`` cannot be synchronised on ``device`` (of
        ``accelerator``, where the strategy knows it)."""
        return None


class TorchSyncBatchNorm(LayerSync):
    """Replaces BatchNorm layers by torch.nn.SyncBatchNorm, which averages statistics over
    every process of the group.

    torch implements the synchronised statistics only for accelerators (its
    ``batch_norm_stats`` kernels have no CPU version, and ``SyncBatchNorm`` refuses CPU
    tensors), so several CPU processes cannot use it; ``check_supported`` says so before
    training starts rather than at the first forward pass. Which devices it synchronises on is
    a fact of each accelerator's spec (``sync_batchnorm``); without an accelerator, CUDA devices
    and the PrivateUse1 device torch names are taken to support it.
    """

    def apply(self, module: nn.Module) -> nn.Module:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)

    def check_supported(
        self,
        module: nn.Module,
        device: torch.device,
        world_size: int,
        accelerator: Accelerator | None = None,
    ) -> None:
        if world_size < 2:
            return  # a single process normalises with its own statistics
        if accelerator is not None:
            supported = accelerator.sync_batchnorm
        else:
            supported = device.type in ("cuda", torch._C._get_privateuse1_backend_name())
        if supported:
            return
        if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()):
            return
        where = f" (accelerator {accelerator.name!r})" if accelerator is not None else ""
        raise MisconfigurationError(
            f"sync_batchnorm=True: torch.nn.SyncBatchNorm synchronises batch statistics only on "
            f"accelerators whose spec says it does (torch {torch.__version__.split('+')[0]} has no "
            f"CPU kernels for it), and this strategy trains on {device.type}{where}; use "
            f"sync_batchnorm=False on {device.type}, or train on an accelerator"
        )

    def revert(self, module: nn.Module) -> nn.Module:
        converted = module
        if isinstance(module, nn.SyncBatchNorm):
            converted = _BatchNormXd(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
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
