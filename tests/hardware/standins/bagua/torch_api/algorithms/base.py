"""Stand-in for ``bagua.torch_api.algorithms.base``: an algorithm is made by name
(``Algorithm.init``, recorded) and reified into its implementation for a process group, which
the wrapped module holds as its ``bagua_algorithm``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import standin_events


class Algorithm:
    def reify(self, process_group: Any) -> AlgorithmImpl:
        return AlgorithmImpl(process_group)

    @classmethod
    def init(cls, name: str, **kwargs: Any) -> Algorithm:
        standin_events.record("Algorithm.init", name=name, kwargs=sorted(kwargs))
        return GlobalAlgorithmRegistry.get(name)(**kwargs)


class AlgorithmImpl:
    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group


class _AlgorithmRegistry(dict[str, Callable[..., Algorithm]]):
    """Algorithm name -> its class."""

    def register(
        self, name: str, algorithm: Callable[..., Algorithm], description: str | None = None
    ) -> None:
        self[name] = algorithm

    def get(self, name: str) -> Callable[..., Algorithm]:  # type: ignore[override]
        return self[name]


GlobalAlgorithmRegistry = _AlgorithmRegistry()
