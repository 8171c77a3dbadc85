"""Stand-in for ``horovod.torch.functions``: broadcasts from the root rank, recorded (a job of
one process has nothing to receive)."""

from __future__ import annotations

from typing import Any

import standin_events
import torch


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
    standin_events.record("broadcast_object", root_rank=root_rank)
    return obj


def broadcast_parameters(params: Any, root_rank: int) -> None:
    standin_events.record("broadcast_parameters", names=list(dict(params)), root_rank=root_rank)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    standin_events.record(
        "broadcast_optimizer_state", optimizer=type(optimizer).__name__, root_rank=root_rank
    )
