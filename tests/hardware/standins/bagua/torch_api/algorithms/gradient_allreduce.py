"""Stand-in for ``bagua.torch_api.algorithms.gradient_allreduce``."""

from __future__ import annotations

from .base import Algorithm


class GradientAllReduceAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = False, average: bool = True) -> None:
        self.hierarchical = hierarchical
        self.average = average
