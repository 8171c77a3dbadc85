"""Stand-in for ``torch_xla.distributed.xla_multiprocessing``.

``spawn`` records how it was called, then starts one CPU process per stand-in device with
torch.multiprocessing, numbering them in PJRT_LOCAL_PROCESS_RANK as torch_xla does, and records whether a
process still holds a process group when its function has returned.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import standin_events
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_xla._internal import tpu


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process(index: int, fn: Callable[..., Any], args: tuple[Any, ...], world: int) -> None:
    os.environ["PJRT_LOCAL_PROCESS_RANK"] = str(index)
    os.environ["PJRT_LOCAL_PROCESS_COUNT"] = str(world)
    fn(index, *args)
    # Started by fork, the process ends now, without atexit handlers: what is still alive
    # here lives on into the process's end.
    standin_events.record("process_end", process_group_alive=dist.is_initialized())


def spawn(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> None:
    standin_events.record(
        "spawn", nprocs=nprocs, start_method=start_method, function=fn.__qualname__
    )
    world = tpu.num_available_devices() if nprocs is None else nprocs
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    mp.start_processes(
        _process,
        args=(fn, args, world),
        nprocs=world,
        join=join,
        daemon=daemon,
        start_method=start_method,
    )
