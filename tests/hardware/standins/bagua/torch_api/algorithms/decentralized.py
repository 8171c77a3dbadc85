"""Stand-in for ``bagua.torch_api.algorithms.decentralized``."""

from __future__ import annotations

from .base import Algorithm


class DecentralizedAlgorithm(Algorithm):
    def __init__(
        self,
        hierarchical: bool = True,
        peer_selection_mode: str = "all",
        communication_interval: int = 1,
    ) -> None:
        self.hierarchical = hierarchical
        self.peer_selection_mode = peer_selection_mode
        self.communication_interval = communication_interval


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, communication_interval: int = 1) -> None:
        self.hierarchical = hierarchical
        self.communication_interval = communication_interval
