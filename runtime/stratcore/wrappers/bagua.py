"""Bagua: the model is wrapped in Bagua's DistributedDataParallel with one of its algorithms.

Bagua initialises its own communicators and torch.distributed's default (NCCL) process group
from the usual rendezvous variables, which the strategy exports first; collectives then run
on that process group. Bagua is imported only when a strategy uses it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

from torch import nn
from torch.optim import Optimizer

from ..exceptions import MisconfigurationError
from ..imports import require
from ..parallel import ParallelStrategyBase
from ..process_group import creating_process_group

#: Algorithms Bagua registers under these names (``Algorithm.init(name, **kwargs)``).
BAGUA_ALGORITHMS = (
    "gradient_allreduce",
    "bytegrad",
    "decentralized",
    "low_precision_decentralized",
    "qadam",
    "async",
)


class BaguaStrategyBase(ParallelStrategyBase):
    """Wraps the model in Bagua's DistributedDataParallel with the chosen algorithm."""

    wrapper: ClassVar[str] = "bagua"

    #: Name of the Bagua algorithm.
    algorithm: str = "gradient_allreduce"
    #: Flatten communication buckets (Bagua's ``gradient_as_bucket_view``).
    flatten: bool = True
    #: Keyword arguments for the algorithm.
    algorithm_kwargs: Mapping[str, Any] | None = None

    def bagua_module(self, name: str = "bagua.torch_api") -> ModuleType:
        """A Bagua module; a clear error names the package if it is missing."""
        require(self.requires, type(self).__name__)
        return importlib.import_module(name)

    # -- environment ---------------------------------------------------------------------

    def export_rendezvous_variables(self) -> None:
        """Bagua reads who is who from the environment, whichever launcher started us."""
        environment = self.cluster_environment
        os.environ.update(
            MASTER_ADDR=environment.main_address,
            MASTER_PORT=str(environment.main_port),
            RANK=str(self.global_rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(self.local_rank),
            LOCAL_WORLD_SIZE=str(self.num_processes),
            NODE_RANK=str(self.node_rank),
        )
        # Every rank must agree on the port of rank 0's autotuning service.
        os.environ.setdefault("BAGUA_SERVICE_PORT", str(environment.main_port + 1))

    def setup_distributed(self) -> None:
        if self.algorithm not in BAGUA_ALGORITHMS:
            raise MisconfigurationError(
                f"algorithm={self.algorithm!r} is not a Bagua algorithm; use one of {', '.join(BAGUA_ALGORITHMS)}"
            )
        communication = self.bagua_module("bagua.torch_api.communication")
        if communication.is_initialized():
            return
        self.export_rendezvous_variables()
        with creating_process_group(self.group_default_modules):
            communication.init_process_group()

    # -- model and optimizers ------------------------------------------------------------

    def algorithm_arguments(self, optimizers: list[Optimizer]) -> dict[str, Any]:
        """Keyword arguments for ``Algorithm.init``; QAdam also needs its optimizer."""
        kwargs = dict(self.algorithm_kwargs or {})
        if self.algorithm == "qadam":
            qadam = self.bagua_module("bagua.torch_api.algorithms.q_adam").QAdamOptimizer
            if len(optimizers) != 1 or not isinstance(optimizers[0], qadam):
                raise MisconfigurationError(
                    "algorithm='qadam' needs exactly one optimizer, a "
                    "bagua.torch_api.algorithms.q_adam.QAdamOptimizer"
                )
            kwargs["q_adam_optimizer"] = optimizers[0]
        return kwargs

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        algorithms = self.bagua_module("bagua.torch_api.algorithms")
        distributed = self.bagua_module("bagua.torch_api.data_parallel.distributed")
        algorithm = algorithms.Algorithm.init(
            self.algorithm, **self.algorithm_arguments(optimizers)
        )
        # The class itself: Bagua's factory function of the same name silently falls back to
        # torch's DDP for arguments it does not support.
        wrapped = distributed.DistributedDataParallel_V1_9_0(
            module, optimizers=optimizers, algorithm=algorithm, gradient_as_bucket_view=self.flatten
        )
        if self.algorithm == "async":
            # Model averaging runs in the background while training runs.
            wrapped.bagua_algorithm.resume(wrapped)
        return wrapped, optimizers

    # -- teardown ------------------------------------------------------------------------

    def teardown(self) -> None:
        algorithm: Any = getattr(self._model, "bagua_algorithm", None)
        if self.algorithm == "async" and algorithm is not None:
            algorithm.abort(self._model)
        super().teardown()
