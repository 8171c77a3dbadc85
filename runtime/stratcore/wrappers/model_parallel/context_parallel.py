"""Context parallelism for 'model_parallel': attention over a sequence split across the
processes of the ``cp`` dimension, through torch's ``context_parallel``.

Inside ``torch.distributed.tensor.experimental.context_parallel(mesh, buffers=...)`` every
buffer (inputs, labels, positional tables) is cut along its sequence dimension, each process
keeping its share (two chunks, head and tail, so that causal attention costs every process
alike), and ``scaled_dot_product_attention`` becomes ring attention: each process attends
with its queries to every process's keys and values, passed around the ring. Everything else
in the model works on the process's own tokens; the processes of a ``cp`` group hold the same
parameters, and 'model_parallel' shards and averages gradients over ``dp_shard`` x ``cp``.

torch 2.13 implements ring attention for the attention kernels of CUDA devices (flash,
memory-efficient and cuDNN attention) only: on the CPU, attention on split sequences has no
sharding rule and fails. ``context_parallel`` below says so before anything runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

import torch
from stratcore.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: Device types on which torch's context-parallel attention does not run.
UNSUPPORTED_DEVICES = frozenset({"cpu"})


def check_device(device: torch.device) -> None:
    """Raise, in one line, where torch's context-parallel attention cannot run."""
    if device.type in UNSUPPORTED_DEVICES:
        raise MisconfigurationError(
            f"context parallelism cannot run attention on {device.type!r} devices: torch "
            f"{torch.__version__} implements ring attention for CUDA's attention kernels only; "
            "use cp=1 here, or CUDA devices"
        )


@contextlib.contextmanager
def context_parallel(
    mesh: DeviceMesh | None,
    device: torch.device,
    buffers: Sequence[torch.Tensor],
    seq_dims: Sequence[int],
    no_restore_buffers: set[torch.Tensor] | None = None,
) -> Generator[None, None, None]:
    """Run the block with ``buffers`` cut along ``seq_dims`` over ``mesh`` (the ``cp``
    dimension) and attention computed across it; the buffers are restored afterwards (but
    those in ``no_restore_buffers``). Without a mesh (``cp`` = 1) nothing changes."""
    buffers, seq_dims = list(buffers), list(seq_dims)
    if len(buffers) != len(seq_dims):
        raise MisconfigurationError(
            f"context_parallel got {len(buffers)} buffers and {len(seq_dims)} seq_dims; give "
            "one sequence dimension per buffer"
        )
    if mesh is None:
        yield
        return
    check_device(device)
    from torch.distributed.tensor.experimental import context_parallel as torch_context_parallel

    with torch_context_parallel(
        mesh, buffers=buffers, buffer_seq_dims=seq_dims, no_restore_buffers=no_restore_buffers
    ):
        yield
