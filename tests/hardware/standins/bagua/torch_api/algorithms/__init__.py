"""Stand-in for ``bagua.torch_api.algorithms``: ``Algorithm.init`` records name and arguments."""

from __future__ import annotations

from typing import Any

import standin_events


class Algorithm:
    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = kwargs

    @classmethod
    def init(cls, name: str, **kwargs: Any) -> Algorithm:
        standin_events.record("Algorithm.init", name=name, kwargs=sorted(kwargs))
        return cls(name, kwargs)

    def resume(self, model: Any) -> None:
        standin_events.record("resume", algorithm=self.name)

    def abort(self, model: Any) -> None:
        standin_events.record("abort", algorithm=self.name)
