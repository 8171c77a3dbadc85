"""Stand-in for ``bagua.torch_api.algorithms.bytegrad``."""

from __future__ import annotations

from .base import Algorithm


class ByteGradAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, average: bool = True) -> None:
        self.hierarchical = hierarchical
        self.average = average
