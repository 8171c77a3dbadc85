"""What the stand-ins of device extensions share: a device count read from the environment
and trimmed by the vendor's visible-devices variable, call records, and a collective backend
registered under the vendor's name with gloo underneath.

Each stand-in package (torch_npu, torch_mlu, torch_musa) is a few lines on top of this module,
with the import paths and functions of the real package that the built-in specs name. None of
them is the vendor's software: they run on the CPU so that the specs' control flow can.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import standin_events


def visible_count(count_env: str, visible_env: str, default: int = 2) -> int:
    """``count_env`` devices (``default`` when unset), as many as ``visible_env`` lists where
    it is set, as the vendors' runtimes count them."""
    count = int(os.environ.get(count_env, str(default)))
    visible = os.environ.get(visible_env)
    if visible is not None:
        listed = [part for part in visible.split(",") if part.strip().isdigit()]
        count = min(count, len(listed))
    return count


def flag(env: str, default: bool = True) -> bool:
    """A yes/no answer of a stand-in probe, from the environment."""
    return os.environ.get(env, "1" if default else "0") == "1"


def record(event: str, **details: object) -> None:
    standin_events.record(event, **details)


def _gloo(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    import torch.distributed as dist

    return dist.ProcessGroupGloo(store, rank, size, timeout)


def register_backend(name: str) -> None:
    """Register ``name`` with torch.distributed, as the extension does, for the CPU tensors
    the stand-in devices hold (the extension registers it for its device, whose kernels a CPU
    build lacks); gloo does the work."""
    import torch.distributed as dist  # imported here: sitecustomize imports this module first

    if name not in dist.Backend.backend_list:
        dist.Backend.register_backend(name, _gloo, devices=["cpu"])
