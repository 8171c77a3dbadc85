"""Stand-in for ``bagua.torch_api.data_parallel.distributed``.

``DistributedDataParallel_V1_9_0`` keeps Bagua's interface (``module``, ``bagua_algorithm``)
and averages gradients with torch's DistributedDataParallel.
"""

from __future__ import annotations

from typing import Any

import standin_events
import torch
from torch.nn.parallel import DistributedDataParallel


class DistributedDataParallel_V1_9_0(torch.nn.Module):
    def __init__(
        self,
        module: torch.nn.Module,
        optimizers: list[torch.optim.Optimizer],
        algorithm: Any,
        gradient_as_bucket_view: bool = True,
    ) -> None:
        super().__init__()
        standin_events.record(
            "DistributedDataParallel",
            optimizers=[type(o).__name__ for o in optimizers],
            algorithm=algorithm.name,
            gradient_as_bucket_view=gradient_as_bucket_view,
        )
        self.module = module
        self.bagua_algorithm = algorithm
        self._ddp = [DistributedDataParallel(module)]  # a list, so that it is no submodule

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._ddp[0](*args, **kwargs)
