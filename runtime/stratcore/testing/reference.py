"""The reference problem every scenario trains, and the single-process result it must match."""

from __future__ import annotations

import torch
from torch import nn

BATCH = 16
FEATURES = 8
#: An int64 that float32 cannot hold: a reduction cast through float32 visibly loses its last bit.
LARGE_INT = 2**40 + 1


# --- the reference problem -----------------------------------------------------------------------


def reference_model(seed: int = 0) -> nn.Module:
    """The small model the scenarios train, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def reference_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch the scenarios train on, drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, FEATURES, generator=generator)
    y = torch.randn(BATCH, 1, generator=generator)
    return x, y


def reference_parameters(
    steps: int, lr: float = 0.1, dtype: torch.dtype = torch.float32
) -> list[torch.Tensor]:
    """Parameters after ``steps`` SGD steps on the whole batch in one process."""
    model = reference_model().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = (t.to(dtype) for t in reference_batch())
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.state_dict().values()]


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's equal share of the batch."""
    size = tensor.shape[0] // world_size
    return tensor[rank * size : (rank + 1) * size]


def reference_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss in the output's precision (float64 under '64-true'), at least float32."""
    dtype = output.dtype if output.dtype == torch.float64 else torch.float32
    return nn.functional.mse_loss(output.to(dtype), target.to(dtype))
