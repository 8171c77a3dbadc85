"""Stand-in for ``horovod.torch``: the calls of Horovod's API that stratlib makes, recorded.

Like Horovod's, this module re-exports the functions of its submodules.
"""

from horovod.torch.compression import Compression
from horovod.torch.functions import (
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from horovod.torch.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    barrier,
    init,
    is_initialized,
    local_rank,
    rank,
    size,
)
from horovod.torch.optimizer import DistributedOptimizer

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "DistributedOptimizer",
    "Max",
    "Min",
    "Product",
    "Sum",
    "allgather",
    "allreduce",
    "barrier",
    "broadcast_object",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "init",
    "is_initialized",
    "local_rank",
    "rank",
    "size",
]
