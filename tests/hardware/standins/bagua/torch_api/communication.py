"""Stand-in for ``bagua.torch_api.communication``.

Like Bagua, ``init_process_group`` reads who is who from RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT and creates torch.distributed's default process group (gloo here, NCCL in Bagua).
At exit it records what of the group is still alive.
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys

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
    # Registered before anything the caller registers once the group exists, so it runs
    # after that at exit: it sees what interpreter shutdown will meet.
    atexit.register(_record_exit)
    dist.init_process_group(
        "gloo",
        init_method="env://",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    _initialized = True


def _record_exit() -> None:
    """Whether the group outlives the exit handlers, and whether torch.distributed.nn's
    collectives keep a group as their default argument (either keeps gloo's threads alive
    into interpreter shutdown)."""
    functional = sys.modules.get("torch.distributed.nn.functional")
    default = None
    if functional is not None:
        default = inspect.signature(functional.all_reduce).parameters["group"].default
    standin_events.record(
        "exit",
        process_group_alive=dist.is_initialized(),
        group_default=None if default is None else type(default).__name__,
    )
