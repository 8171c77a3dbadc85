"""Stand-in for ``habana_frameworks.torch.distributed.hccl``.

Like the real module, importing it registers the 'hccl' backend with torch.distributed; here
the backend is gloo underneath, so that HCCL's rules (applied by stratlib) run on CPUs.
"""

from __future__ import annotations

import os
from datetime import timedelta

import standin_events
import torch.distributed as dist


def _gloo_process_group(
    store: dist.Store, rank: int, size: int, timeout: timedelta
) -> dist.ProcessGroup:
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if "hccl" not in dist.Backend.backend_list:
    dist.Backend.register_backend("hccl", _gloo_process_group, devices=["cpu"])


def initialize_distributed_hpu() -> tuple[int, int, int]:
    """Records whether a process group existed already when it was called."""
    standin_events.record("initialize_distributed_hpu", process_group_exists=dist.is_initialized())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return world_size, rank, local_rank
