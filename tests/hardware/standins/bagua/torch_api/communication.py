"""Stand-in for ``bagua.torch_api.communication``.

Like Bagua, ``init_process_group`` reads who is who from RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT and creates torch.distributed's default process group (gloo here, NCCL in Bagua).
"""

from __future__ import annotations

import os

import standin_events
import torch.distributed as dist

_initialized = False

RENDEZVOUS_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)


def is_initialized() -> bool:
    return _initialized


def init_process_group() -> None:
    global _initialized
    standin_events.record(
        "init_process_group",
        environment={
            name: os.environ.get(name) for name in (*RENDEZVOUS_VARIABLES, "BAGUA_SERVICE_PORT")
        },
    )
    dist.init_process_group(
        "gloo",
        init_method="env://",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    _initialized = True
