"""Stand-in for ``horovod.torch.mpi_ops``.

Rank and size come from HOROVOD_RANK / HOROVOD_SIZE as horovodrun sets them (0 and 1 when
unset). Collectives return what a job of one process would: allreduce and allgather keep
the values of this process.
"""

from __future__ import annotations

import os

import standin_events
import torch

from horovod.torch.compression import Compression

# The reduction ops: Horovod reads them from its C library (horovod/common/message.h, enum
# ReduceOp).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OP_NAMES = {
    Average: "Average",
    Sum: "Sum",
    Adasum: "Adasum",
    Min: "Min",
    Max: "Max",
    Product: "Product",
}

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


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: type = Compression.none,
    op: int | None = None,
) -> torch.Tensor:
    """Horovod averages where neither ``op`` nor the deprecated ``average`` says otherwise."""
    standin_events.record(
        "allreduce", op=_OP_NAMES[Average if op is None else op], dtype=str(tensor.dtype)
    )
    return tensor.clone()


def allgather(tensor: torch.Tensor, name: str | None = None) -> torch.Tensor:
    standin_events.record("allgather", shape=list(tensor.shape))
    return tensor.clone()


def barrier() -> None:
    standin_events.record("barrier")
