"""Data, model and reference run shared by the training scripts and the tests."""

from __future__ import annotations

import torch
from torch import nn

SAMPLES = 8
LR = 0.1


def data() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.linspace(-1.0, 1.0, SAMPLES * 3).reshape(SAMPLES, 3)
    y = (x @ torch.tensor([[0.5], [-1.0], [2.0]]) + 0.25).sin()
    return x, y


def model() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def reference(steps: int) -> dict[str, list[float]]:
    """One process, plain torch, SGD on the whole batch."""
    net = model()
    x, y = data()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()
    return {name: p.detach().flatten().tolist() for name, p in net.named_parameters()}
