"""Behaviour of strategies that train on one device in the calling process."""

from __future__ import annotations

from typing import Any

import torch

from .accelerator import Accelerator
from .checkpoints.io import CheckpointIO
from .precision.base import PrecisionBase
from .strategy import StrategyBase


class SingleDeviceStrategyBase(StrategyBase):
    """One device, one process: collectives are identities and the launcher runs in place."""

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: PrecisionBase | None = None,
    ) -> None:
        super().__init__(
            accelerator=accelerator, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin
        )
        self._device = torch.device(device) if device is not None else None

    @property
    def root_device(self) -> torch.device:
        if self._device is None:
            accelerator = self.accelerator
            self._device = accelerator.get_parallel_devices(accelerator.parse_devices(1))[0]
        return self._device

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        from .collectives import normalize_reduce_op, reduce_each

        normalize_reduce_op(reduce_op)  # reject unknown operations here too
        if not isinstance(tensor, torch.Tensor):
            # Numbers become tensors, as in a parallel strategy, so code runs the same on both.
            return reduce_each(tensor, self.root_device, lambda t: t)
        return tensor

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        return tensor.unsqueeze(0) if sync_grads else tensor.detach().unsqueeze(0)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def barrier(self, name: str | None = None) -> None:
        """Nothing to wait for."""
