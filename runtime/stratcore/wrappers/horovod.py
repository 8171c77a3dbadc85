"""Horovod: gradients are averaged by ``hvd.DistributedOptimizer``, the processes are started
by ``horovodrun`` (or ``mpirun``).

Horovod brings its own communication layer, so no torch.distributed process group is created:
every collective goes through ``horovod.torch``. Nothing of Horovod is imported until a
strategy uses it. The ``horovodrun`` launcher is ``stratcore.launchers.horovodrun``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Generator
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from ..collectives import normalize_reduce_op, reduce_each
from ..exceptions import MisconfigurationError
from ..imports import require
from ..parallel import ParallelStrategyBase

HOROVOD_MODULE = "horovod.torch"

#: Reduction name -> attribute of ``horovod.torch`` naming the operation.
HOROVOD_OPS = {"sum": "Sum", "mean": "Average", "min": "Min", "max": "Max", "product": "Product"}


class HorovodStrategyBase(ParallelStrategyBase):
    """Trains with Horovod: ``hvd.init()`` instead of a process group, rank 0's parameters and
    optimizer state broadcast at setup, and optimizers wrapped in ``hvd.DistributedOptimizer``.

    The learning rate is not scaled with the number of processes: averaged gradients of
    equal shares of a batch equal the gradient of the whole batch, as with DDP.
    """

    wrapper: ClassVar[str] = "horovod"

    #: Backward passes accumulated locally before gradients are averaged.
    backward_passes_per_step: int = 1
    #: 'none', or 'fp16' to send gradients as float16.
    gradient_compression: str = "none"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._horovod: ModuleType | None = None
        # Optimizers whose gradients were already averaged for the coming step (by clipping).
        self._synchronized: set[int] = set()
        # How many block_backward_sync() blocks are open.
        self._blocked = 0

    @property
    def hvd(self) -> ModuleType:
        """``horovod.torch``, imported on first use."""
        if self._horovod is None:
            require(self.requires, type(self).__name__)
            self._horovod = importlib.import_module(HOROVOD_MODULE)
        return self._horovod

    # -- environment ---------------------------------------------------------------------

    def setup_distributed(self) -> None:
        """Start Horovod; its view of the job must agree with the cluster environment's."""
        hvd = self.hvd
        hvd.init()
        if hvd.size() != self.world_size or hvd.rank() != self.global_rank:
            raise MisconfigurationError(
                f"Horovod runs this process as rank {hvd.rank()} of {hvd.size()}, but "
                f"{type(self.cluster_environment).__name__} says rank {self.global_rank} of "
                f"{self.world_size}; start the script with horovodrun and matching devices and num_nodes"
            )

    def _horovod_ready(self) -> bool:
        return self._horovod is not None and bool(self._horovod.is_initialized())

    # -- model and optimizers ------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        hvd = self.hvd
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        compression = (
            hvd.Compression.fp16 if self.gradient_compression == "fp16" else hvd.Compression.none
        )
        wrapped = []
        for optimizer in optimizers:
            self._broadcast_optimizer_state(optimizer)
            # Horovod names every parameter of the optimizer, and only those.
            own = {id(p) for group in optimizer.param_groups for p in group["params"]}
            named = [(name, p) for name, p in module.named_parameters() if id(p) in own]
            wrapped.append(
                hvd.DistributedOptimizer(
                    optimizer,
                    named_parameters=named,
                    compression=compression,
                    backward_passes_per_step=self.backward_passes_per_step,
                    op=hvd.Average,
                )
            )
        return module, wrapped

    def _broadcast_optimizer_state(self, optimizer: Optimizer) -> None:
        """Give every rank rank 0's optimizer: its state, or for a fresh optimizer (no state
        yet) its hyperparameters alone.

        ``hvd.broadcast_optimizer_state`` first steps a fresh optimizer with zero gradients to
        create its state (horovod/torch/functions.py): Adam would then count one step more than
        it took and AdamW decay the weights once, so training would no longer match one process.
        """
        if optimizer.state:
            self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            return
        options = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        received = self.hvd.broadcast_object(options, root_rank=0)
        for group, values in zip(optimizer.param_groups, received, strict=True):
            group.update(values)

    def _synchronize(self, optimizer: Optimizer) -> None:
        """Finish averaging ``optimizer``'s gradients (once per step)."""
        if id(optimizer) not in self._synchronized and hasattr(optimizer, "synchronize"):
            optimizer.synchronize()
            self._synchronized.add(id(optimizer))

    def _optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        if not hasattr(optimizer, "skip_synchronize"):  # not set up by this strategy
            return super()._optimizer_step(optimizer, **kwargs)
        # Averaging must be complete before a gradient scaler unscales or steps; the step
        # itself must then not average a second time.
        self._synchronize(optimizer)
        self._synchronized.discard(id(optimizer))
        with optimizer.skip_synchronize():
            return super()._optimizer_step(optimizer, **kwargs)

    def _zero_grad(self, optimizer: Optimizer) -> None:
        if not hasattr(optimizer, "skip_synchronize"):
            return super()._zero_grad(optimizer)
        # Horovod's zero_grad() takes no argument; torch's, which it calls, clears to None.
        optimizer.zero_grad()

    def clip_gradients(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        self._synchronize(optimizer)
        return super().clip_gradients(module, optimizer, max_norm)

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Backward passes inside the block accumulate gradients locally; the first one after
        it averages them (with ``backward_passes_per_step`` above 1: the last of that many).

        Horovod starts averaging a parameter's gradient when the backward passes since the
        last step reach ``backward_passes_per_step``; a pass inside the block is not counted.
        """
        self._blocked += 1
        try:
            yield
        finally:
            self._blocked -= 1

    def backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        if self._blocked:
            for optimizer in self._optimizers:
                _uncount_next_backward(optimizer)
        super().backward(tensor, *args, **kwargs)

    # -- collectives ---------------------------------------------------------------------

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        if not isinstance(tensor, torch.Tensor):
            return reduce_each(tensor, self.root_device, lambda t: self.reduce(t, group, reduce_op))
        name = normalize_reduce_op(reduce_op)
        if group is not None:
            raise MisconfigurationError(
                "Horovod reduces over every process; group= is not supported"
            )
        if not self._horovod_ready():
            return tensor
        backend = self.collective_backend
        if name not in backend.reduce_ops:
            raise MisconfigurationError(
                f"backend {backend.name!r} cannot reduce with {name!r}; it supports "
                f"{', '.join(sorted(backend.reduce_ops))}"
            )
        result = tensor.detach().clone()
        if name == "mean" and not result.is_floating_point():
            result = result.to(torch.get_default_dtype())
        return self.hvd.allreduce(result, op=getattr(self.hvd, HOROVOD_OPS[name]))

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        if group is not None:
            raise MisconfigurationError(
                "Horovod gathers from every process; group= is not supported"
            )
        source = tensor if sync_grads else tensor.detach()
        if not self._horovod_ready():
            return source.unsqueeze(0)
        # hvd.allgather concatenates along the first dimension and is differentiable.
        gathered = self.hvd.allgather(source.unsqueeze(0))
        if gathered.requires_grad:
            # Its backward averages the gradient over the ranks; torch.distributed's sums, so
            # that each rank's tensor gets the gradient of every rank's loss: scale it alike.
            world_size = self.world_size
            gathered.register_hook(lambda grad: grad * world_size)
        return gathered

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self._horovod_ready():
            return obj
        return self.hvd.broadcast_object(obj, root_rank=src)

    def barrier(self, name: str | None = None) -> None:
        if self._horovod_ready():
            self.hvd.barrier()


def _uncount_next_backward(optimizer: Optimizer) -> None:
    """Make Horovod's ``optimizer`` not count the coming backward pass towards averaging.

    Horovod's DistributedOptimizer counts down, per parameter, the backward passes left
    before it averages that parameter's gradient (``_allreduce_delay``, which its gradient
    hook decrements and ``synchronize()`` resets: horovod/torch/optimizer.py). A parameter
    already averaged for this step (0 passes left) is left alone: Horovod's own error for a
    backward pass too many then says what went wrong.
    """
    if not hasattr(optimizer, "skip_synchronize"):  # not set up by this strategy
        return
    passes_left = getattr(optimizer, "_allreduce_delay", None)
    if not isinstance(passes_left, dict):
        raise MisconfigurationError(
            "block_backward_sync() needs Horovod's DistributedOptimizer to count backward passes "
            "(horovod 0.28); set backward_passes_per_step to accumulate gradients instead"
        )
    for parameter, left in passes_left.items():
        if left > 0:
            passes_left[parameter] = left + 1
