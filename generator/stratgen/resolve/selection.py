"""What of a catalog goes into a project's package: everything from the project's own specs,
plus the built-in entries they rely on (every entry, when all the specs are built-in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import BASE_SPECS, Catalog


@dataclass(frozen=True)
class Selection:
    """What of a catalog goes into the package (everything local plus what it relies on)."""

    strategies: tuple[str, ...]
    accelerators: tuple[str, ...]
    precision_plugins: tuple[str, ...]
    environments: tuple[str, ...]
    backends: tuple[str, ...]

    @classmethod
    def everything(cls, catalog: Catalog) -> Selection:
        return cls(
            tuple(catalog.strategies),
            tuple(catalog.accelerators),
            tuple(catalog.precision_plugins),
            tuple(catalog.environments),
            tuple(catalog.backends),
        )


def select(catalog: Catalog) -> Selection:
    """Everything from the project's own specs, plus the built-in entries they rely on."""
    local_files = {s.path for s in catalog.sources if not s.builtin}
    if not local_files:
        return Selection.everything(catalog)

    def local(item: Any) -> bool:
        return item.source.path in local_files

    strategies: dict[str, None] = {}
    for name in BASE_SPECS:
        strategies[name] = None
    for strategy in catalog.strategies.values():
        if local(strategy):
            chain = []
            current: Any = strategy
            while current is not None:
                chain.append(current.name)
                current = current.parent
            for name in reversed(chain):
                strategies[name] = None
    ordered_strategies = tuple(n for n in catalog.strategies if n in strategies)

    accelerators = {"cpu"} | {a.name for a in catalog.accelerators.values() if local(a)}
    environments: set[str] = {e.name for e in catalog.environments.values() if local(e)}
    backends: set[str] = set()
    wrappers = set()
    for name in ordered_strategies:
        strategy = catalog.strategies[name]
        accelerators.update(strategy.accelerators)
        environments.update(strategy.cluster)
        wrappers.add(strategy.wrapper)
        if strategy.backend is not None:
            backends.add(strategy.backend.name)
    for name in list(environments):
        env = catalog.environments[name].parent
        while env is not None:
            environments.add(env.name)
            env = env.parent
    for name in accelerators:
        backends.add(catalog.accelerators[name].backend.name)
    backends.update(n for n, src in catalog.backend_sources.items() if local_files & {src.path})

    plugins: set[str] = set()
    for plugin in catalog.precision_plugins.values():
        wanted = local(plugin) or (
            (not plugin.wrappers or set(plugin.wrappers) & wrappers)
            and (not plugin.accelerators or set(plugin.accelerators) & accelerators)
        )
        if wanted:
            current = plugin
            while current is not None:
                plugins.add(current.name)
                current = current.parent
    return Selection(
        strategies=ordered_strategies,
        accelerators=tuple(a for a in catalog.accelerators if a in accelerators),
        precision_plugins=tuple(p for p in catalog.precision_plugins if p in plugins),
        environments=tuple(e for e in catalog.environments if e in environments),
        backends=tuple(b for b in catalog.backends if b in backends),
    )
