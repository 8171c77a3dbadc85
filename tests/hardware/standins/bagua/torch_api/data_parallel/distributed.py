"""Stand-in for ``bagua.torch_api.data_parallel.distributed``.

``DistributedDataParallel_V1_9_0`` keeps Bagua's interface (``module``, ``bagua_algorithm``: the
algorithm reified for the process group) and averages gradients with torch's
DistributedDataParallel.
"""

from __future__ import annotations

from typing import Any

import standin_events
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..algorithms import Algorithm, AlgorithmImpl


class DistributedDataParallel_V1_9_0(torch.nn.Module):
    def __init__(
        self,
        module: torch.nn.Module,
        *,
        gradient_as_bucket_view: bool = True,
        optimizers: list[torch.optim.Optimizer],
        algorithm: Algorithm,
    ) -> None:
        super().__init__()
        standin_events.record(
            "DistributedDataParallel",
            optimizers=[type(o).__name__ for o in optimizers],
            algorithm=type(algorithm).__name__,
            gradient_as_bucket_view=gradient_as_bucket_view,
        )
        self.module = module
        self._algorithm = algorithm.reify(dist.group.WORLD)
        self._ddp = [DistributedDataParallel(module)]  # a list, so that it is no submodule

    @property
    def bagua_algorithm(self) -> AlgorithmImpl:
        return self._algorithm

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self._ddp[0](*inputs, **kwargs)
