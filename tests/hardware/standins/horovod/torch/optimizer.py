"""Stand-in for ``horovod.torch.optimizer``: ``DistributedOptimizer`` makes, as Horovod does, a
new optimizer of a subclass of the given one's class (which gets the methods of
``_DistributedOptimizer``) over the same parameter groups. Averaging over one process changes
nothing; the calls are recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from typing import Any

import standin_events
import torch

from horovod.torch.compression import Compression
from horovod.torch.mpi_ops import _OP_NAMES, Average


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods Horovod gives the optimizer's class."""

    def __init__(
        self,
        params: Any,
        named_parameters: Iterable[tuple[str, torch.Tensor]] | None,
        compression: type,
        backward_passes_per_step: int = 1,
        op: int = Average,
    ) -> None:
        super(self.__class__, self).__init__(params)  # the optimizer's own class, as in Horovod
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self._synchronized = False
        self._should_synchronize = True

    def synchronize(self) -> None:
        standin_events.record("synchronize")
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Generator[None, None, None]:
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        if self._should_synchronize:
            # Horovod averages here unless told that it happened already.
            self.synchronize()
        standin_events.record("step", synchronized=self._synchronized)
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self) -> None:
        """Horovod's takes no argument; torch's, which it calls, clears gradients to None."""
        return super(self.__class__, self).zero_grad()


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
    compression: type = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = Average,
) -> torch.optim.Optimizer:
    named_parameters = list(named_parameters) if named_parameters is not None else None
    names = [name for name, _ in named_parameters or []]
    kinds = {kind: name for name, kind in vars(Compression).items() if not name.startswith("_")}
    standin_events.record(
        "DistributedOptimizer",
        names=names,
        compression=kinds.get(compression, repr(compression)),
        backward_passes_per_step=backward_passes_per_step,
        op=_OP_NAMES[op],
    )
    cls = type(
        optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__)
    )
    wrapped: torch.optim.Optimizer = cls(
        optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op
    )
    return wrapped
