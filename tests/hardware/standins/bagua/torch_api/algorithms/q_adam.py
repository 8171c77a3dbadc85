"""Stand-in for ``bagua.torch_api.algorithms.q_adam``: QAdamOptimizer is plain Adam here (Bagua's
runs Adam for ``warmup_steps``, then compresses the momentum it communicates)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .base import Algorithm


class QAdamOptimizer(torch.optim.Adam):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        warmup_steps: int = 100,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.warmup_steps = warmup_steps


class QAdamAlgorithm(Algorithm):
    def __init__(self, q_adam_optimizer: QAdamOptimizer, hierarchical: bool = True) -> None:
        self.optimizer = q_adam_optimizer
        self.hierarchical = hierarchical
