"""Stand-in for ``torch_xla.distributed.xla_backend``.

Like the real module, importing it registers the 'xla' backend and the 'xla://' rendezvous
with torch.distributed. Here the backend is gloo, and the rendezvous meets at the address the
stand-in spawn chose.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import standin_events
import torch.distributed as dist


def _gloo_process_group(
    store: dist.Store, rank: int, size: int, timeout: timedelta
) -> dist.ProcessGroup:
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _rendezvous(
    url: str, timeout: timedelta = timedelta(minutes=5), **kwargs: Any
) -> Iterator[Any]:
    rank = int(os.environ["PJRT_LOCAL_PROCESS_RANK"])
    world = int(os.environ["PJRT_LOCAL_PROCESS_COUNT"])
    standin_events.record("xla_rendezvous", url=url, rank=rank, world_size=world)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0, timeout=timeout
    )
    yield store, rank, world


if "xla" not in dist.Backend.backend_list:
    dist.Backend.register_backend("xla", _gloo_process_group, devices=["cpu"])
dist.register_rendezvous_handler("xla", _rendezvous)
