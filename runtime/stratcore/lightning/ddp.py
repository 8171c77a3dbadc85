"""``DDPAdapter``: a DDP spec's facts on Lightning's own ``DDPStrategy``, for the Trainer and for
Fabric, on devices that are not CUDA's.

Lightning 2.6 wraps the model in DistributedDataParallel on a side stream of CUDA's whenever it
passes ``device_ids``, which it does for every device but the CPU:
``torch.cuda.stream(torch.cuda.Stream())`` in ``lightning/pytorch/strategies/ddp.py``
(``DDPStrategy._setup_model``) and ``lightning/fabric/strategies/ddp.py``
(``DDPStrategy.setup_module``). On a machine without CUDA that raises "torch.cuda.Stream
requires CUDA support" before the first step, whatever the device. The side stream is for the
work DDP's constructor queues (broadcasting the parameters), which should not wait on the
default stream: this adapter makes it a stream of the device's own type, through its device
module (``torch.get_device_module``), or none where the module has no streams. On CUDA devices
Lightning's own method runs, unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import check_lightning_version

check_lightning_version()

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from .strategies import StrategyAdapter  # noqa: E402

__all__ = ["DDPAdapter", "device_side_stream"]


@contextlib.contextmanager
def device_side_stream(device: torch.device) -> Iterator[None]:
    """A side stream of ``device``'s own type made current for the block, as Lightning makes
    one of CUDA's; no stream where the device's module has none (the CPU's)."""
    module: Any = torch.get_device_module(device.type)
    if not (hasattr(module, "Stream") and hasattr(module, "stream")):
        yield
        return
    with module.stream(module.Stream()):
        yield


class DDPAdapter(StrategyAdapter):
    """``StrategyAdapter`` for Lightning's DDPStrategy; see the module documentation."""

    def _wrap(self, module: nn.Module, device_ids: list[int] | None) -> DistributedDataParallel:
        """DistributedDataParallel around ``module``, built on a side stream of the device's."""
        kwargs: dict[str, Any] = getattr(self, "_ddp_kwargs", {})
        if device_ids is None:
            return DistributedDataParallel(module=module, device_ids=None, **kwargs)
        device = torch.device(self.root_device.type, device_ids[0])
        with device_side_stream(device):
            return DistributedDataParallel(module=module, device_ids=device_ids, **kwargs)

    def _on_cuda(self) -> bool:
        return bool(self.root_device.type == "cuda")

    def _setup_model(self, model: nn.Module) -> DistributedDataParallel:
        """The Trainer's DDPStrategy: the model in DistributedDataParallel."""
        if self._on_cuda():
            return super()._setup_model(model)  # type: ignore[misc]
        return self._wrap(model, self.determine_ddp_device_ids())  # type: ignore[attr-defined]

    def setup_module(self, module: nn.Module) -> DistributedDataParallel:
        """Fabric's DDPStrategy: the module in DistributedDataParallel."""
        if self._on_cuda():
            return super().setup_module(module)  # type: ignore[misc]
        return self._wrap(module, self._determine_ddp_device_ids())  # type: ignore[attr-defined]
