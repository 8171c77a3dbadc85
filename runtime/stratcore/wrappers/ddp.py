"""torch.nn.parallel.DistributedDataParallel: every process holds a replica, gradients are
averaged during the backward pass."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.optim import Optimizer

from ..exceptions import MisconfigurationError
from ..parallel import ParallelStrategyBase


class DDPStrategyBase(ParallelStrategyBase):
    """Wraps the model in DistributedDataParallel.

    Subclasses customise the wrapping by overriding ``ddp_kwargs``, or ``configure_ddp``:
    either ``configure_ddp(self, module)`` returning the wrapped module, or, as in Lightning's
    ``CustomDDPStrategy`` example, ``configure_ddp(self)`` assigning the wrapped
    ``self.model``.
    """

    wrapper: ClassVar[str] = "ddp"

    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    bucket_cap_mb: float | None = None
    broadcast_buffers: bool = True

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        configure = self.configure_ddp
        if inspect.signature(configure).parameters:
            return configure(module), optimizers
        # The form Lightning 1.x's DDP hook had, ``def configure_ddp(self)``: it replaces
        # ``self.model`` by the wrapped model.
        self.model = module
        configure()  # type: ignore[call-arg]
        if self.model is None:
            raise MisconfigurationError(
                f"{type(self).__name__}.configure_ddp() left self.model empty"
            )
        return self.model, optimizers

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for DistributedDataParallel."""
        kwargs: dict[str, Any] = {
            "find_unused_parameters": self.find_unused_parameters,
            "static_graph": self.static_graph,
            "gradient_as_bucket_view": self.gradient_as_bucket_view,
        }
        if not self.broadcast_buffers:  # only passed when changed: torch deprecates the argument
            kwargs["broadcast_buffers"] = False
        if self.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = self.bucket_cap_mb
        return kwargs

    def ddp_device_ids(self) -> list[int] | None:
        """Device ids for DDP: the process's device where devices are indexed, else None."""
        device = self.root_device
        return [device.index] if device.type != "cpu" and device.index is not None else None

    def configure_ddp(self, module: nn.Module) -> nn.Module:
        """Wrap ``module`` (already on this process's device) for the backward pass."""
        return DistributedDataParallel(
            module, device_ids=self.ddp_device_ids(), **self.ddp_kwargs()
        )


class DDP2StrategyBase(DDPStrategyBase):
    """One process per node: DataParallel over the node's devices, DDP across nodes.

    With one device per node this is exactly DDP.
    """

    wrapper: ClassVar[str] = "ddp2"
    one_process_per_node: ClassVar[bool] = True

    @property
    def root_device(self) -> Any:
        return self.parallel_devices[0]

    def configure_ranks(self) -> None:
        environment = self.cluster_environment
        environment.set_world_size(self.num_nodes)
        environment.set_global_rank(self.node_rank)

    def configure_ddp(self, module: nn.Module) -> nn.Module:
        devices = self.parallel_devices
        if len(devices) > 1 and all(d.index is not None for d in devices):
            inner = DataParallel(module, device_ids=[d.index for d in devices])
            return DistributedDataParallel(inner, device_ids=None, **self.ddp_kwargs())
        return super().configure_ddp(module)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.num_nodes, "rank": self.node_rank}
