"""Stand-in for ``horovod.torch``: the calls of Horovod's API that stratlib makes, recorded.

Rank and size come from HOROVOD_RANK / HOROVOD_SIZE as horovodrun sets them (0 and 1 when
unset). Collectives return what a job of one process would: allreduce and allgather keep
the values of this process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import standin_events
import torch

Sum, Average, Min, Max, Product = "Sum", "Average", "Min", "Max", "Product"
Compression = SimpleNamespace(none="none", fp16="fp16")

_initialized = False


def init() -> None:
    global _initialized
    _initialized = True
    standin_events.record("init")


def is_initialized() -> bool:
    return _initialized


def rank() -> int:
    return int(os.environ.get("HOROVOD_RANK", "0"))


def size() -> int:
    return int(os.environ.get("HOROVOD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("HOROVOD_LOCAL_RANK", "0"))


def allreduce(tensor: torch.Tensor, op: str = Average) -> torch.Tensor:
    standin_events.record("allreduce", op=op, dtype=str(tensor.dtype))
    return tensor.clone()


def allgather(tensor: torch.Tensor) -> torch.Tensor:
    standin_events.record("allgather", shape=list(tensor.shape))
    return tensor.clone()


def broadcast_object(obj: Any, root_rank: int = 0) -> Any:
    standin_events.record("broadcast_object", root_rank=root_rank)
    return obj


def barrier() -> None:
    standin_events.record("barrier")


def broadcast_parameters(params: Any, root_rank: int) -> None:
    standin_events.record("broadcast_parameters", names=list(dict(params)), root_rank=root_rank)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    standin_events.record(
        "broadcast_optimizer_state", optimizer=type(optimizer).__name__, root_rank=root_rank
    )


class _DistributedOptimizer:
    """Methods Horovod adds to the optimizer's class; averaging over one process is a no-op."""

    _synchronized = False
    _skip = False

    def synchronize(self) -> None:
        standin_events.record("synchronize")
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Generator[None, None, None]:
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure: Any = None) -> Any:
        if not self._skip:
            # Horovod averages here unless told that it happened already.
            self.synchronize()
        standin_events.record("step", synchronized=self._synchronized)
        self._synchronized = False
        return super().step(closure)  # type: ignore[misc]


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Any = None,
    compression: str = Compression.none,
    backward_passes_per_step: int = 1,
    op: str = Average,
) -> torch.optim.Optimizer:
    names = [name for name, _ in named_parameters or []]
    standin_events.record(
        "DistributedOptimizer",
        names=names,
        compression=compression,
        backward_passes_per_step=backward_passes_per_step,
        op=op,
    )
    # Like Horovod, an object of a subclass of the optimizer's class, sharing its state.
    cls = type(type(optimizer).__name__, (_DistributedOptimizer, type(optimizer)), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    return wrapped
