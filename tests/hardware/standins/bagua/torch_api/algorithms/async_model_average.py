"""Stand-in for ``bagua.torch_api.algorithms.async_model_average``: its implementation's
``resume`` and ``abort`` (starting and stopping the background averaging) are recorded."""

from __future__ import annotations

from typing import Any

import standin_events

from .base import Algorithm, AlgorithmImpl


class AsyncModelAverageAlgorithmImpl(AlgorithmImpl):
    def __init__(
        self,
        process_group: Any,
        peer_selection_mode: str = "all",
        sync_interval_ms: int = 500,
        warmup_steps: int = 0,
    ) -> None:
        super().__init__(process_group)
        self.sync_interval_ms = sync_interval_ms

    def abort(self, bagua_ddp: Any) -> None:
        standin_events.record("abort", module=type(bagua_ddp).__name__)

    def resume(self, bagua_ddp: Any) -> None:
        standin_events.record("resume", module=type(bagua_ddp).__name__)


class AsyncModelAverageAlgorithm(Algorithm):
    def __init__(
        self, peer_selection_mode: str = "all", sync_interval_ms: int = 500, warmup_steps: int = 0
    ) -> None:
        self.peer_selection_mode = peer_selection_mode
        self.sync_interval_ms = sync_interval_ms
        self.warmup_steps = warmup_steps

    def reify(self, process_group: Any) -> AsyncModelAverageAlgorithmImpl:
        return AsyncModelAverageAlgorithmImpl(
            process_group, self.peer_selection_mode, self.sync_interval_ms, self.warmup_steps
        )
