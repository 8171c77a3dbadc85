"""The tables of a generated package, and how a class finds the package it belongs to.

Every generated package has a ``registry`` module that builds one [`Registry`][stratcore.registry.Registry] of its
strategies, accelerators, precision plugins, cluster environments and backends, and
registers it here when the package is imported. A strategy looks up defaults (its
accelerator, its cluster environment, its precision plugin, its backend's capabilities) in
the registry of the package that defines it or its nearest generated base class, so several
generated packages can share one runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .collectives import CollectiveBackend
from .contract import best_plugin
from .exceptions import MisconfigurationError
from .precision.base import canonical_precision
from .wording import did_you_mean

if TYPE_CHECKING:
    from .accelerator import Accelerator
    from .environment import ClusterEnvironmentBase
    from .precision.base import PrecisionBase
    from .strategy import StrategyBase


@dataclass(frozen=True)
class StrategyEntry:
    """A registry name: the strategy class and the option values the name presets."""

    cls: type[StrategyBase]
    preset: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    """Every strategy, accelerator, precision plugin, cluster environment and backend of one
    generated package, by name."""

    #: The package's import name, e.g. ``"stratlib"``.
    package: str
    #: Registry name -> strategy class and the option preset the name stands for.
    strategies: Mapping[str, StrategyEntry]
    #: Accelerator name -> class, in order of preference for ``accelerator="auto"``.
    accelerators: Mapping[str, type[Accelerator]]
    #: Precision plugins that can be selected; the most specific match wins.
    precision_plugins: tuple[type[PrecisionBase], ...]
    #: Cluster environment name -> class.
    cluster_environments: Mapping[str, type[ClusterEnvironmentBase]]
    #: Backend name -> what it can reduce natively.
    backends: Mapping[str, CollectiveBackend]

    # -- lookups by name ----------------------------------------------------------------------

    def strategy_entry(self, name: str) -> StrategyEntry:
        """The class and preset a registry name stands for; an unknown name is a one-line error
        listing close ones."""
        if name not in self.strategies:
            raise MisconfigurationError(
                f"strategy={name!r} is not a registered strategy"
                f"{did_you_mean(name, self.strategies)}; "
                f"registered: {', '.join(sorted(self.strategies))}"
            )
        return self.strategies[name]

    def accelerator_class(self, name: str) -> type[Accelerator]:
        """The accelerator class registered under ``name``; an unknown name is a one-line error."""
        if name not in self.accelerators:
            raise MisconfigurationError(
                f"accelerator={name!r} is not known{did_you_mean(name, self.accelerators)}; "
                f"known: {', '.join(self.accelerators)}, or 'auto'"
            )
        return self.accelerators[name]

    def backend(self, name: str) -> CollectiveBackend:
        """A declared backend, or one with default capabilities for names the specs do not
        know."""
        return self.backends.get(name) or CollectiveBackend(name)

    def known_backends(self) -> list[str]:
        """Backends a process group can use: those the specs declare and those torch knows
        (including ones registered by plugins)."""
        import torch.distributed as dist

        names = list(self.backends)
        torch_names = getattr(getattr(dist, "Backend", None), "backend_list", [])
        names += [n for n in torch_names if n not in names and n not in ("undefined", "fake")]
        return names

    # -- defaults of a strategy ---------------------------------------------------------------

    def default_accelerator(self, strategy: type[StrategyBase]) -> Accelerator:
        """The first available accelerator among those the strategy supports."""
        names = strategy.accelerators or tuple(self.accelerators)
        for name in names:
            cls = self.accelerators.get(name)
            if cls is not None and cls.is_available():
                return cls()
        raise MisconfigurationError(
            f"{strategy.__name__} runs on {', '.join(names)}, and none of them is available here"
        )

    def detect_environment(self, strategy: type[StrategyBase]) -> ClusterEnvironmentBase:
        """The first environment, in the strategy's detection order, that this process runs
        under."""
        for name in strategy.cluster:
            cls = self.cluster_environments.get(name)
            if cls is not None and cls.detect():
                return cls()
        if "lightning" in self.cluster_environments:
            return self.cluster_environments["lightning"]()
        raise MisconfigurationError(
            f"{strategy.__name__}: none of the cluster environments "
            f"{', '.join(strategy.cluster)} applies to this process; "
            "pass cluster_environment=..."
        )

    def precision_plugin_class(
        self,
        strategy: type[StrategyBase],
        accelerator: Accelerator | type[Accelerator],
        precision: Any,
    ) -> type[PrecisionBase]:
        """The most specific plugin serving ``precision`` for this strategy on this
        accelerator: one made for the strategy's wrapper beats one made for the accelerator,
        which beats a general one."""
        mode = canonical_precision(precision)
        best: type[PrecisionBase] | None = best_plugin(
            self.precision_plugins, mode, strategy.wrapper, accelerator.name
        )
        if best is None:
            raise MisconfigurationError(
                f"precision={precision!r}: no precision plugin serves it for "
                f"{strategy.__name__} on {accelerator.name!r}"
            )
        return best

    def select_precision_plugin(
        self, strategy: type[StrategyBase], accelerator: Accelerator, precision: Any
    ) -> PrecisionBase:
        """An instance of [`precision_plugin_class`][stratcore.registry.Registry.precision_plugin_class] for ``precision``."""
        mode = canonical_precision(precision)
        plugin = self.precision_plugin_class(strategy, accelerator, mode)
        return plugin(mode, device_type=accelerator.device_type)


_REGISTRIES: dict[str, Registry] = {}


def register(registry: Registry) -> Registry:
    """Make ``registry`` the tables of its package (a package registers itself on import)."""
    _REGISTRIES[registry.package] = registry
    return registry


def registry_of(cls: type) -> Registry:
    """The registry of the generated package that defines ``cls`` or its nearest base."""
    for klass in cls.__mro__:
        module = klass.__module__
        for package, registry in _REGISTRIES.items():
            if module == package or module.startswith(package + "."):
                return registry
    raise MisconfigurationError(
        f"{cls.__name__} belongs to no generated package: import the package that defines "
        "its strategy base (e.g. `import stratlib`) first"
    )


def loaded_packages() -> list[str]:
    """The generated packages imported so far, in the order they registered."""
    return list(_REGISTRIES)


def package_registry(package: str) -> Registry:
    """The registry of ``package``, importing the package if it is not loaded yet."""
    if package not in _REGISTRIES:
        import importlib

        importlib.import_module(package)
    if package not in _REGISTRIES:
        raise MisconfigurationError(f"{package} is not a package generated by stratgen")
    return _REGISTRIES[package]
