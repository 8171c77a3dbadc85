"""``ModelParallelAdapter``: a 'model_parallel' spec's facts on Lightning's own
``ModelParallelStrategy``, for the Trainer and for Fabric.

Lightning's strategy does the work: a ``(data_parallel, tensor_parallel)`` DeviceMesh of
``data_parallel_size`` x ``tensor_parallel_size`` processes, the model laid out on it by the
LightningModule's ``configure_model`` hook (Trainer) or by a ``parallelize_fn`` (Fabric), and
its distributed checkpoints. ``StrategyAdapter`` carries the spec's backend, precisions,
cluster environments and step hooks into it, as for every other strategy. This adapter adds
one thing, for Fabric, whose strategy cannot be built without a ``parallelize_fn`` (so that
Lightning registers it under no name): given none, the model is sharded with ``fully_shard``
over the data-parallel dimension, and 'auto' sizes make every process a data-parallel
replica, as stratlib's 'model_parallel' does without a ``parallelize_fn``. Spec options
Lightning's strategy does not take (pipeline and context parallelism, the named dimensions)
stay with stratlib's strategy.

Lightning binds the process group to the device on every device but the CPU (``device_id`` in
``_setup_distributed`` of ``lightning/pytorch/strategies/model_parallel.py`` and
``lightning/fabric/strategies/model_parallel.py``). A bound group makes DeviceMesh split it
into the mesh's groups, which a backend that cannot split groups refuses ("No backend for the
parent process group or its backend does not support splitting"). For such a backend (the spec
says which can: ``splits_groups``) the adapter creates the group first, unbound, as on the CPU;
the mesh then makes its groups anew.
"""

from __future__ import annotations

from typing import Any

from . import check_lightning_version

check_lightning_version()

from lightning.fabric.strategies import (  # noqa: E402
    ModelParallelStrategy as FabricModelParallelStrategy,
)
from lightning.fabric.utilities.distributed import _init_dist_connection  # noqa: E402
from torch import nn  # noqa: E402

from ..wrappers.fsdp.fully_shard import fsdp2  # noqa: E402
from ..wrappers.model_parallel.parallel_dims import lightning_sizes  # noqa: E402
from .strategies import StrategyAdapter  # noqa: E402

__all__ = ["ModelParallelAdapter", "shard_data_parallel"]


def shard_data_parallel(module: nn.Module, device_mesh: Any) -> nn.Module:
    """The ``parallelize_fn`` Fabric's strategy gets when it is given none: ``fully_shard``
    over the data-parallel dimension."""
    fsdp2().fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


class ModelParallelAdapter(StrategyAdapter):
    """``StrategyAdapter`` for Lightning's ModelParallelStrategy; see the module
    documentation."""

    #: Lightning's sizes ('auto' or a number of processes), set by its constructor.
    _data_parallel_size: Any
    _tensor_parallel_size: Any
    num_nodes: int
    num_processes: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: Whether Fabric's strategy got no parallelize_fn and lays the model out itself.
        self._default_layout = (
            isinstance(self, FabricModelParallelStrategy)
            and not args
            and kwargs.get("parallelize_fn") is None
        )
        if self._default_layout:
            kwargs["parallelize_fn"] = shard_data_parallel
        super().__init__(*args, **kwargs)

    def setup_environment(self) -> None:
        # Lightning resolves 'auto' here, as the number of nodes and the processes per node.
        data, tensor = lightning_sizes(
            self._data_parallel_size,
            self._tensor_parallel_size,
            world=self.num_nodes * self.num_processes,
            nodes=self.num_nodes,
            processes_per_node=self.num_processes,
            layout_given=not self._default_layout,
        )
        self._data_parallel_size, self._tensor_parallel_size = data, tensor
        super().setup_environment()

    def _setup_distributed(self) -> None:
        """Lightning's, with the process group created unbound first where the backend cannot
        split groups (see the module documentation)."""
        device_type = self.root_device.type
        if device_type != "cpu" and not self.collective_backend.splits_groups:
            if isinstance(self, FabricModelParallelStrategy):
                self._set_world_ranks()
            else:
                self.set_world_ranks()  # type: ignore[attr-defined]
            _init_dist_connection(
                self.cluster_environment,
                self._get_process_group_backend(),
                timeout=self._timeout,  # type: ignore[attr-defined]
            )
        super()._setup_distributed()  # type: ignore[misc]
