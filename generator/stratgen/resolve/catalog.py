"""The resolved model: every spec entry with ``extends`` applied and references checked.

``resolver`` takes parsed spec files and returns a ``Catalog`` in which each strategy,
accelerator, precision plugin, cluster environment and backend has concrete values, knows its
parent and the file it came from. Templates only ever see these objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stratcore.contract import BASES, ROOT_BASE, best_plugin, specificity

from ..spec.model import (
    AcceleratorSpec,
    Backend,
    ClusterEnvironmentSpec,
    Option,
    PrecisionPluginSpec,
    SpecFile,
    StrategySpec,
)


@dataclass(frozen=True)
class Source:
    """A spec file as loaded: its parsed content and how to name it."""

    path: str  # as shown to users and stamped into headers, e.g. 'specs/ddp.yaml'
    stem: str  # file name without suffix, e.g. 'ddp'
    spec: SpecFile
    builtin: bool  # shipped with stratgen rather than written in the user's project
    hooks_dir: str = ""  # directory that relative hooks files are resolved against
    #: The file's text and its YAML tree (``stratgen.spec.yaml_loader.Node``), for what the
    #: parsed spec drops: its comments, found at the lines of its keys (the docs target).
    text: str = field(default="", compare=False, repr=False)
    tree: Any = field(default=None, compare=False, repr=False)


def test_module_name(source: Source) -> str:
    """The generated test module of a spec file, test_<spec>.py (the stratlib target writes it,
    the docs target's page of a device names it); built-in specs rendered into a user's project
    are told apart from the project's own specs of the same file name."""
    prefix = "test_stratgen_" if source.path.startswith("stratgen:") else "test_"
    return f"{prefix}{source.stem}.py"


#: The root strategy spec, and the specs that define the base kinds (each named after its kind).
ROOT_STRATEGY = ROOT_BASE
BASE_SPECS = tuple(BASES)


# --- resolved entities ----------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    spec: StrategySpec
    source: Source
    name: str
    class_name: str
    module: str
    description: str
    abstract: bool
    base: str
    parent: Strategy | None
    wrapper: str
    launcher: str
    backend: Backend | None  # None: chosen from the accelerator ("auto")
    default_precision: str | None
    supported_precisions: tuple[str, ...]
    cluster: tuple[str, ...]
    accelerators: tuple[str, ...]
    options: dict[str, Option]
    aliases: dict[str, dict[str, Any]]
    requires: tuple[Any, ...]
    hooks: str | None

    @property
    def is_canonical_base(self) -> bool:
        """Whether this is the spec that defines a base kind (single_device or parallel)."""
        return self.name == self.base and self.name != ROOT_STRATEGY

    @property
    def own_options(self) -> list[str]:
        inherited = self.parent.options if self.parent else {}
        return [name for name in self.options if name not in inherited]

    @property
    def registry_names(self) -> list[str]:
        return [] if self.abstract else [self.name, *self.aliases]


@dataclass(frozen=True)
class Accelerator:
    spec: AcceleratorSpec
    source: Source
    name: str
    class_name: str
    module: str
    backend: Backend

    @property
    def preference(self) -> tuple[bool, bool]:
        """Sort key for accelerator='auto': devices first, then an accelerator for whichever
        device torch finds (``current_device``), the CPU last."""
        return (self.name == "cpu", self.spec.current_device is not None)


@dataclass(frozen=True)
class PrecisionPlugin:
    spec: PrecisionPluginSpec
    source: Source
    name: str
    class_name: str
    module: str
    description: str
    abstract: bool
    parent: PrecisionPlugin | None
    kind: str
    modes: tuple[str, ...]
    wrappers: tuple[str, ...]
    accelerators: tuple[str, ...]
    grad_scaler: str | None
    requires: tuple[Any, ...]

    @property
    def specificity(self) -> int:
        return specificity(self.wrappers, self.accelerators)


@dataclass(frozen=True)
class ClusterEnvironment:
    spec: ClusterEnvironmentSpec
    source: Source
    name: str
    class_name: str
    module: str
    description: str
    abstract: bool
    parent: ClusterEnvironment | None
    values: dict[str, Any]  # every inheritable field, resolved


@dataclass(frozen=True)
class Catalog:
    """Everything the specs declare, resolved and cross-checked."""

    sources: tuple[Source, ...]
    backends: dict[str, Backend] = field(default_factory=dict)
    backend_sources: dict[str, Source] = field(default_factory=dict)
    accelerators: dict[str, Accelerator] = field(default_factory=dict)
    strategies: dict[str, Strategy] = field(default_factory=dict)
    precision_plugins: dict[str, PrecisionPlugin] = field(default_factory=dict)
    environments: dict[str, ClusterEnvironment] = field(default_factory=dict)

    def registry(self) -> dict[str, tuple[Strategy, dict[str, Any]]]:
        """Every registry name with its strategy and the option preset it stands for."""
        table: dict[str, tuple[Strategy, dict[str, Any]]] = {}
        for strategy in self.strategies.values():
            if strategy.abstract:
                continue
            table[strategy.name] = (strategy, {})
            for alias, preset in strategy.aliases.items():
                table[alias] = (strategy, preset)
        return table

    def select_precision(
        self, strategy: Strategy, accelerator: str, mode: str
    ) -> PrecisionPlugin | None:
        """The plugin the runtime will pick for this strategy, accelerator and precision."""
        plugins = (p for p in self.precision_plugins.values() if not p.abstract)
        best: PrecisionPlugin | None = best_plugin(plugins, mode, strategy.wrapper, accelerator)
        return best


def walk_options(strategy: Strategy) -> Iterator[tuple[str, Option, bool]]:
    """Each effective option with whether this strategy declared it (vs inherited it)."""
    own = set(strategy.own_options)
    for name, option in strategy.options.items():
        yield name, option, name in own


__all__ = [
    "Accelerator",
    "Catalog",
    "ClusterEnvironment",
    "PrecisionPlugin",
    "Source",
    "Strategy",
    "walk_options",
]
