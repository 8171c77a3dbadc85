"""Horovod: gradients are averaged by ``hvd.DistributedOptimizer``, the processes are started
by ``horovodrun`` (or ``mpirun``).

Horovod brings its own communication layer, so no torch.distributed process group is created:
every collective goes through ``horovod.torch``. Nothing of Horovod is imported until a
strategy uses it. The ``horovodrun`` launcher (``HorovodRunLauncher``) lives here too.
"""

from __future__ import annotations

import contextlib
import importlib
import shlex
from collections.abc import Callable, Generator
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn
from torch.optim import Optimizer

from ..collectives import normalize_reduce_op, reduce_each
from ..exceptions import MisconfigurationError
from ..imports import require
from ..launchers import Launcher, run_reporting_errors, script_command
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
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
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

    def clip_gradients(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        self._synchronize(optimizer)
        return super().clip_gradients(module, optimizer, max_norm)

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Horovod averages when ``backward_passes_per_step`` backward passes have run; set that
        option to accumulate gradients."""
        yield

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
        return self.hvd.allgather(source.unsqueeze(0))

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self._horovod_ready():
            return obj
        return self.hvd.broadcast_object(obj, root_rank=src)

    def barrier(self, name: str | None = None) -> None:
        if self._horovod_ready():
            self.hvd.barrier()


# --- horovodrun ------------------------------------------------------------------------------


def horovodrun_command(num_processes: int, num_nodes: int, processes_per_node: int) -> str:
    """The command line that starts this script under horovodrun."""
    try:
        script = shlex.join(script_command())
    except MisconfigurationError:  # an interactive session has no script to name
        script = "python your_script.py"
    hosts = ""
    if num_nodes > 1:
        hosts = " -H " + ",".join(
            f"host{index + 1}:{processes_per_node}" for index in range(num_nodes)
        )
    return f"horovodrun -np {num_processes}{hosts} {script}"


class HorovodRunLauncher(Launcher):
    """Runs in the processes horovodrun (or mpirun) started; alone it only runs one process."""

    name = "horovodrun"

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy: Any = self.strategy
        environment = strategy.cluster_environment
        expected = strategy.num_nodes * strategy.num_processes
        started_externally = environment.creates_processes_externally and not environment.settable
        if expected > 1 and not started_externally:
            command = horovodrun_command(expected, strategy.num_nodes, strategy.num_processes)
            raise MisconfigurationError(
                f"{type(strategy).__name__} does not start processes itself: horovodrun does. "
                f"Run: {command}"
            )
        return run_reporting_errors(strategy, function, args, kwargs)
