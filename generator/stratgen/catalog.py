"""The resolved model: every spec entry with ``extends`` applied and references checked.

``resolve`` takes parsed spec files and returns a ``Catalog`` in which each strategy,
accelerator, precision plugin, cluster environment and backend has concrete values, knows its
parent and the file it came from. Templates only ever see these objects.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from .corefacts import strategy_attributes
from .errors import Location, SpecError, SpecProblem, did_you_mean, one_of
from .model import (
    ENVIRONMENT_VALUES,
    PRECISIONS,
    AcceleratorSpec,
    Backend,
    ClusterEnvironmentSpec,
    Option,
    PrecisionPluginSpec,
    SpecFile,
    StrategySpec,
    ValueSource,
)
from .parse import spec_fields


@dataclass(frozen=True)
class Source:
    """A spec file as loaded: its parsed content and how to name it."""

    path: str  # as shown to users and stamped into headers, e.g. 'specs/ddp.yaml'
    stem: str  # file name without suffix, e.g. 'ddp'
    spec: SpecFile
    builtin: bool  # shipped with stratgen rather than written in the user's project
    hooks_dir: str = ""  # directory that relative hooks files are resolved against


# --- facts about the core runtime that the generator must respect ------------------------------

#: Wrapper -> the bases it works with and the options its core mixin reads (with their types).
WRAPPERS: dict[str, tuple[frozenset[str], dict[str, tuple[str, ...]]]] = {
    "none": (frozenset({"strategy", "single_device", "parallel"}), {}),
    "dp": (frozenset({"parallel"}), {}),
    "ddp": (
        frozenset({"parallel"}),
        {
            "find_unused_parameters": ("bool",),
            "static_graph": ("bool",),
            "gradient_as_bucket_view": ("bool",),
            "bucket_cap_mb": ("float", "int"),
            "broadcast_buffers": ("bool",),
        },
    ),
    "fsdp": (
        frozenset({"parallel"}),
        {
            "auto_wrap_min_params": ("int",),
            "auto_wrap_layers": ("sequence",),
            "cpu_offload": ("bool",),
            "reshard_after_forward": ("bool",),
            "state_dict_type": ("str",),
            "sharding_strategy": ("str",),
            "device_mesh": ("sequence",),
            "activation_checkpointing_policy": ("sequence",),
        },
    ),
    "fairscale_sharded": (
        frozenset({"parallel"}),
        {"reduce_buffer_size": ("int",), "broadcast_buffers": ("bool",)},
    ),
    "fairscale_fsdp": (
        frozenset({"parallel"}),
        {
            "auto_wrap_min_params": ("int",),
            "cpu_offload": ("bool",),
            "reshard_after_forward": ("bool",),
        },
    ),
    "deepspeed": (
        frozenset({"parallel"}),
        {
            "zero_stage": ("int",),
            "offload_optimizer": ("bool",),
            "offload_parameters": ("bool",),
            "offload_optimizer_device": ("str",),
            "offload_params_device": ("str",),
            "nvme_path": ("path",),
            "config": ("mapping", "path"),
            "logging_batch_size_per_gpu": ("int",),
            "state_dict_type": ("str",),
        },
    ),
    "horovod": (
        frozenset({"parallel"}),
        {"backward_passes_per_step": ("int",), "gradient_compression": ("str",)},
    ),
    "bagua": (
        frozenset({"parallel"}),
        {"algorithm": ("str",), "flatten": ("bool",), "algorithm_kwargs": ("mapping",)},
    ),
    "xla": (
        frozenset({"single_device", "parallel"}),
        {"sync_module_states": ("bool",), "debug": ("bool",)},
    ),
    "model_parallel": (
        frozenset({"parallel"}),
        {
            "parallelize_fn": ("any",),
            "data_parallel_size": ("int", "str"),
            "tensor_parallel_size": ("int", "str"),
            "save_distributed_checkpoint": ("bool",),
            "activation_checkpointing_policy": ("sequence",),
        },
    ),
}

WRAPPERS["ddp2"] = WRAPPERS["ddp"]
WRAPPERS["xla_fsdp"] = WRAPPERS["xla"]

#: Options every parallel strategy's core reads.
PARALLEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "timeout": ("float", "int"),
    "process_group_backend": ("str",),
    "start_method": ("str",),
}

#: Constructor arguments the core takes; options may not reuse these names.
PLUMBING: dict[str, tuple[str, ...]] = {
    "strategy": ("accelerator", "checkpoint_io", "precision_plugin"),
    "single_device": ("device", "accelerator", "checkpoint_io", "precision_plugin"),
    "parallel": (
        "accelerator",
        "parallel_devices",
        "cluster_environment",
        "checkpoint_io",
        "precision_plugin",
        "num_nodes",
    ),
}
#: Names an option may not take besides the core's own attributes (see ``reserved_option_names``):
#: constructor arguments of the core and keyword arguments of get_strategy.
RESERVED_ARGUMENTS = frozenset(
    {name for names in PLUMBING.values() for name in names}
    | {"self", "strategy", "precision", "devices", "sync_batchnorm"}
)


def core_read_options() -> frozenset[str]:
    """Options the core itself reads (a spec may declare them, with a matching type)."""
    return frozenset(PARALLEL_OPTIONS) | {o for _, options in WRAPPERS.values() for o in options}


def reserved_option_names() -> frozenset[str]:
    """Names an option may not take: an option is stored as an instance attribute, so a name
    the core's strategy classes use would shadow one of their methods or facts."""
    return RESERVED_ARGUMENTS | (strategy_attributes() - core_read_options())


#: Names that generated modules import from the core, typing or the package itself: a
#: generated class of the same name would shadow them. tests/test_reserved_names.py derives
#: the names from the generator's tables and from generated code, so this cannot go stale.
RESERVED_CLASS_NAMES = frozenset(
    {
        "Accelerator",
        "Any",
        "ApexPrecisionBase",
        "AsyncCheckpointIO",
        "BaguaStrategyBase",
        "CheckpointIO",
        "ClassVar",
        "ClusterEnvironmentBase",
        "CollectiveBackend",
        "Condition",
        "DDP2StrategyBase",
        "DDPStrategyBase",
        "DataParallelStrategyBase",
        "DeepSpeedStrategyBase",
        "DeepSpeedPrecisionBase",
        "DoublePrecisionBase",
        "ExternalLauncher",
        "FSDPStrategyBase",
        "FSDPPrecisionBase",
        "FairscaleFSDPStrategyBase",
        "ForkLauncher",
        "ForkServerLauncher",
        "HalfPrecisionBase",
        "HorovodStrategyBase",
        "HorovodRunLauncher",
        "IPUPrecisionBase",
        "InlineLauncher",
        "Launcher",
        "LayerSync",
        "Literal",
        "Mapping",
        "MisconfigurationError",
        "MissingDependencyError",
        "MixedPrecisionBase",
        "ModelParallelStrategyBase",
        "ModuleType",
        "ParallelStrategyBase",
        "PopenLauncher",
        "PrecisionBase",
        "ProcessFailedError",
        "Registry",
        "Requirement",
        "Sequence",
        "ShardedStrategyBase",
        "SingleDeviceStrategyBase",
        "SpawnLauncher",
        "StrategyBase",
        "StrategyEntry",
        "StrategyFactory",
        "TorchCheckpointIO",
        "TorchSyncBatchNorm",
        "TransformerEnginePrecisionBase",
        "ValueSource",
        "XLAFSDPStrategyBase",
        "XLALauncher",
        "XLAStrategyBase",
        "XLAPrecisionBase",
    }
)

ROOT_STRATEGY = "strategy"
BASE_SPECS = ("strategy", "single_device", "parallel")

_OPTION_PYTYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "path": (str,),
    "mapping": (dict,),
    "sequence": (list, tuple),
    "any": (object,),
}


def value_fits(value: Any, types: Iterable[str]) -> bool:
    """Whether a literal from a spec has one of the option types."""
    for t in types:
        allowed = _OPTION_PYTYPES[t]
        if isinstance(value, bool) and t in ("int", "float"):
            continue
        if isinstance(value, allowed):
            return True
    return False


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
        return 2 * bool(self.wrappers) + bool(self.accelerators)


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
        best: PrecisionPlugin | None = None
        for plugin in self.precision_plugins.values():
            if plugin.abstract or mode not in plugin.modes:
                continue
            if plugin.wrappers and strategy.wrapper not in plugin.wrappers:
                continue
            if plugin.accelerators and accelerator not in plugin.accelerators:
                continue
            if best is None or plugin.specificity > best.specificity:
                best = plugin
        return best


# --- resolution -----------------------------------------------------------------------------

E = TypeVar("E")


class _Problems:
    def __init__(self) -> None:
        self.items: list[SpecProblem] = []

    def add(
        self,
        loc: Location,
        path: str,
        message: str,
        related: Location | None = None,
        related_label: str = "the other definition",
    ) -> None:
        self.items.append(SpecProblem(loc, path, message, related, related_label))

    def raise_if_any(self) -> None:
        if self.items:
            raise SpecError(self.items)


@dataclass
class _Entry(Generic[E]):
    spec: E
    source: Source
    path: str  # field path within its file, e.g. 'strategies[2]'


def _listing(names: Iterable[str], limit: int = 12) -> str:
    """Names for an 'allowed are ...' part of a message, sorted, the list cut at ``limit``."""
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:limit])
    return shown + (f" and {len(ordered) - limit} more" if len(ordered) > limit else "")


def _field_loc(spec: Any, key: str, *more: str) -> Location:
    """Where ``key`` (or the first of ``more`` found, most precise first) is in the spec."""
    for candidate in (*more, key):
        if candidate in spec.locs:
            location: Location = spec.locs[candidate]
            return location
    location = spec.loc
    return location


def _clash(what: str, name: str, source: Source, other: Source) -> str:
    """The message for a name defined twice, with the way out when one of the two files is
    one of stratgen's built-in specs."""
    message = f"{what} {name!r} is already defined in {other.path}"
    if source.builtin != other.builtin:
        message += (
            "; stratgen's built-in specs join the project's own: to use only the project's, "
            "set `builtin-specs = false` under [tool.stratgen] in pyproject.toml (or pass "
            "--no-builtin-specs), else rename one of them"
        )
    return message


def _collect(
    sources: Iterable[Source], attribute: str, problems: _Problems, what: str
) -> dict[str, _Entry[Any]]:
    """Gather the named entries of one family from every file, reporting name clashes."""
    entries: dict[str, _Entry[Any]] = {}
    for source in sources:
        for index, spec in enumerate(getattr(source.spec, attribute)):
            path = f"{attribute}[{index}]"
            if spec.name in entries:
                other = entries[spec.name]
                problems.add(
                    _field_loc(spec, "name"),
                    f"{path}.name",
                    _clash(what, spec.name, source, other.source),
                    related=_field_loc(other.spec, "name"),
                )
                continue
            entries[spec.name] = _Entry(spec, source, path)
    return entries


def _lineage(
    entries: Mapping[str, _Entry[Any]],
    parent_of: Any,
    problems: _Problems,
    what: str,
    plural: str,
) -> list[str]:
    """Names ordered parents first; reports missing parents and cycles."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: list[str]) -> bool:
        if state.get(name) == "done":
            return True
        if state.get(name) == "active":
            cycle = [*chain[chain.index(name) :], name]
            entry = entries[name]
            first = entries[cycle[-2]]
            problems.add(
                _field_loc(first.spec, "extends"),
                f"{first.path}.extends",
                f"{plural} inherit from each other in a cycle: {' -> '.join(cycle)}",
                related=_field_loc(entry.spec, "extends"),
                related_label=f"where {name!r} extends {cycle[1]!r}",
            )
            return False
        state[name] = "active"
        entry = entries[name]
        parent, key = parent_of(entry.spec)
        ok = True
        if parent is not None:
            if parent not in entries:
                problems.add(
                    _field_loc(entry.spec, key),
                    f"{entry.path}.{key}",
                    f"no {what} named {parent!r}{did_you_mean(parent, entries)}; "
                    f"{plural} defined: {_listing(n for n in entries if n != name)}",
                )
                ok = False
            else:
                ok = visit(parent, [*chain, name])
        state[name] = "done"
        if ok:
            order.append(name)
        return ok

    for name in entries:
        visit(name, [])
    return order


def _inherit(spec: Any, parent: Any | None) -> dict[str, Any]:
    """Field values of ``spec`` with unset inheritable fields taken from ``parent``."""
    values: dict[str, Any] = {}
    for f in spec_fields(type(spec)):
        value = getattr(spec, f.name)
        if value is None and parent is not None and f.metadata.get("inherit", True):
            value = parent[f.name] if isinstance(parent, dict) else getattr(parent, f.name)
        values[f.name] = value
    return values


def resolve(sources: Iterable[Source]) -> Catalog:
    """Resolve every spec file together; raises SpecError listing every problem."""
    sources = tuple(sources)
    problems = _Problems()
    catalog = Catalog(sources=sources)

    _resolve_backends(catalog, problems)
    _resolve_accelerators(catalog, problems)
    _resolve_environments(catalog, problems)
    _resolve_precision_plugins(catalog, problems)
    _resolve_strategies(catalog, problems)
    problems.raise_if_any()
    _check_names(catalog, problems)
    _check_precision_coverage(catalog, problems)
    problems.raise_if_any()
    return catalog


def _resolve_backends(catalog: Catalog, problems: _Problems) -> None:
    for source in catalog.sources:
        for index, backend in enumerate(source.spec.backends):
            _declare_backend(catalog, problems, backend, source, f"backends[{index}]")
    # Inline backends declared by strategies join the same namespace.
    for source in catalog.sources:
        for index, strategy in enumerate(source.spec.strategies):
            if isinstance(strategy.backend, Backend):
                _declare_backend(
                    catalog, problems, strategy.backend, source, f"strategies[{index}].backend"
                )


def _declare_backend(
    catalog: Catalog, problems: _Problems, backend: Backend, source: Source, path: str
) -> None:
    existing = catalog.backends.get(backend.name)
    if existing is not None and existing != backend:
        problems.add(
            _field_loc(backend, "name"),
            f"{path}.name",
            f"backend {backend.name!r} is already declared differently in "
            f"{catalog.backend_sources[backend.name].path}",
            related=existing.loc,
        )
        return
    if "sum" not in backend.reduce_ops:
        problems.add(
            _field_loc(backend, "reduce_ops"),
            f"{path}.reduce_ops",
            "every backend must support 'sum' (reduce_boolean_decision and the emulated "
            "mean rely on it)",
        )
    for src, dst in backend.casts.items():
        if src == dst:
            problems.add(
                _field_loc(backend, "casts"), f"{path}.casts.{src}", f"casts {src} to itself"
            )
    catalog.backends.setdefault(backend.name, backend)
    catalog.backend_sources.setdefault(backend.name, source)


def _backend_ref(
    catalog: Catalog, problems: _Problems, ref: str, loc: Location, path: str
) -> Backend | None:
    if ref in catalog.backends:
        return catalog.backends[ref]
    problems.add(
        loc,
        path,
        f"no backend named {ref!r}{did_you_mean(ref, catalog.backends)}; "
        f"declared backends: {', '.join(catalog.backends) or 'none'}",
    )
    return None


def _check_precision_defaults(
    problems: _Problems, spec: Any, path: str, default: str | None, supported: tuple[str, ...]
) -> None:
    if default is not None and default not in supported:
        problems.add(
            _field_loc(spec, "default"),
            f"{path}.default",
            f"default precision {default!r} is not among the supported ones: {one_of(supported)}",
        )


def _resolve_accelerators(catalog: Catalog, problems: _Problems) -> None:
    seen: dict[str, tuple[AcceleratorSpec, Source]] = {}
    for source in catalog.sources:
        spec = source.spec.accelerator
        if spec is None:
            continue
        if spec.name in seen:
            other, other_source = seen[spec.name]
            problems.add(
                _field_loc(spec, "name"),
                "accelerator.name",
                _clash("accelerator", spec.name, source, other_source),
                related=_field_loc(other, "name"),
            )
            continue
        seen[spec.name] = (spec, source)
        backend = _backend_ref(
            catalog, problems, spec.backend, _field_loc(spec, "backend"), "accelerator.backend"
        )
        supported = spec.precision.supported or PRECISIONS
        _check_precision_defaults(
            problems, spec.precision, "accelerator.precision", spec.precision.default, supported
        )
        if backend is not None:
            catalog.accelerators[spec.name] = Accelerator(
                spec=spec,
                source=source,
                name=spec.name,
                class_name=spec.class_name,
                module=spec.module or spec.name,
                backend=backend,
            )


def _resolve_environments(catalog: Catalog, problems: _Problems) -> None:
    entries = _collect(catalog.sources, "cluster_environments", problems, "cluster environment")
    order = _lineage(
        entries,
        lambda s: (s.extends, "extends"),
        problems,
        "cluster environment",
        "cluster environments",
    )
    for name in order:
        entry = entries[name]
        spec: ClusterEnvironmentSpec = entry.spec
        parent = catalog.environments.get(spec.extends) if spec.extends else None
        values = _inherit(spec, parent.values if parent else None)
        if not spec.abstract:
            for key in ("detect", *ENVIRONMENT_VALUES):
                if values[key] is None:
                    problems.add(
                        spec.loc,
                        f"{entry.path}.{key}",
                        f"cluster environment {name!r} needs {key!r} (set it or inherit it "
                        "with 'extends')",
                    )
        for key in (k for k in ENVIRONMENT_VALUES if k != "main_address"):  # the numbers
            source_spec: ValueSource | None = values[key]
            if (
                source_spec is not None
                and isinstance(source_spec.default, str)
                and (source_spec.parse in (None, "int"))
            ):
                problems.add(
                    source_spec.loc,
                    f"{entry.path}.{key}.default",
                    f"{key} is a number; its default must be an integer, found "
                    f"{source_spec.default!r}",
                )
        catalog.environments[name] = ClusterEnvironment(
            spec=spec,
            source=entry.source,
            name=name,
            class_name=spec.class_name,
            module=spec.module or name,
            description=spec.description,
            abstract=spec.abstract,
            parent=parent,
            values=values,
        )


def _resolve_precision_plugins(catalog: Catalog, problems: _Problems) -> None:
    entries = _collect(catalog.sources, "precision_plugins", problems, "precision plugin")
    order = _lineage(
        entries, lambda s: (s.extends, "extends"), problems, "precision plugin", "precision plugins"
    )
    for name in order:
        entry = entries[name]
        spec: PrecisionPluginSpec = entry.spec
        parent = catalog.precision_plugins.get(spec.extends) if spec.extends else None
        values = {
            key: (
                getattr(spec, key)
                if getattr(spec, key) is not None or parent is None
                else getattr(parent, key)
            )
            for key in ("kind", "wrappers", "accelerators", "grad_scaler", "requires")
        }
        values["modes"] = spec.modes
        for accelerator in values["accelerators"] or ():
            if accelerator not in catalog.accelerators:
                problems.add(
                    _field_loc(spec, "accelerators"),
                    f"{entry.path}.accelerators",
                    f"no accelerator named {accelerator!r}"
                    f"{did_you_mean(accelerator, catalog.accelerators)}; "
                    f"accelerators: {_listing(catalog.accelerators)}",
                )
        if not spec.abstract and not values["modes"]:
            problems.add(
                spec.loc, f"{entry.path}.modes", "a plugin that is not abstract needs 'modes'"
            )
        catalog.precision_plugins[name] = PrecisionPlugin(
            spec=spec,
            source=entry.source,
            name=name,
            class_name=spec.class_name,
            module=spec.module or name,
            description=spec.description,
            abstract=spec.abstract,
            parent=parent,
            kind=values["kind"] or "precision",
            modes=tuple(values["modes"] or ()),
            wrappers=tuple(values["wrappers"] or ()),
            accelerators=tuple(values["accelerators"] or ()),
            grad_scaler=values["grad_scaler"],
            requires=tuple(values["requires"] or ()),
        )
    _check_precision_ambiguity(catalog, problems)


def _check_precision_ambiguity(catalog: Catalog, problems: _Problems) -> None:
    plugins = [p for p in catalog.precision_plugins.values() if not p.abstract]
    for i, a in enumerate(plugins):
        for b in plugins[i + 1 :]:
            shared = set(a.modes) & set(b.modes)
            if not shared or a.specificity != b.specificity:
                continue
            wrappers_meet = not a.wrappers or not b.wrappers or set(a.wrappers) & set(b.wrappers)
            accels_meet = (
                not a.accelerators
                or not b.accelerators
                or set(a.accelerators) & set(b.accelerators)
            )
            if wrappers_meet and accels_meet:
                problems.add(
                    _field_loc(b.spec, "modes"),
                    f"{_spec_path(b)}.modes",
                    f"serves {one_of(sorted(shared))} in the same scope as {a.name!r}; narrow "
                    "one of them with 'wrappers' or 'accelerators'",
                    related=_field_loc(a.spec, "modes"),
                    related_label=f"where {a.name!r} serves {one_of(sorted(shared))}",
                )


def _strategy_parent(spec: StrategySpec) -> tuple[str | None, str]:
    if spec.extends is not None:
        return spec.extends, "extends"
    if spec.base is not None and spec.base != spec.name:
        return spec.base, "base"
    if spec.name != ROOT_STRATEGY:
        return ROOT_STRATEGY, "name"
    return None, "name"


def _resolve_strategies(catalog: Catalog, problems: _Problems) -> None:
    entries = _collect(catalog.sources, "strategies", problems, "strategy")
    for name in BASE_SPECS:
        if name not in entries and entries:
            problems.add(
                Location("specs"),
                "strategies",
                f"the base strategy {name!r} is missing; the built-in specs define it",
            )
    problems.raise_if_any()
    order = _lineage(entries, _strategy_parent, problems, "strategy", "strategies")
    for name in order:
        entry = entries[name]
        resolved = _resolve_strategy(catalog, problems, entry)
        if resolved is not None:
            catalog.strategies[name] = resolved


def _resolve_strategy(
    catalog: Catalog, problems: _Problems, entry: _Entry[StrategySpec]
) -> Strategy | None:
    spec = entry.spec
    path = entry.path
    parent_name, _ = _strategy_parent(spec)
    parent = catalog.strategies.get(parent_name) if parent_name else None
    if parent_name is not None and parent is None:
        return None  # the parent failed; its problem is already reported

    base = spec.base or (parent.base if parent else ROOT_STRATEGY)
    if spec.name in BASE_SPECS and base != spec.name:
        problems.add(
            _field_loc(spec, "base"),
            f"{path}.base",
            f"the base spec {spec.name!r} must have base {spec.name!r}",
        )
    if spec.name not in BASE_SPECS and spec.extends is None and spec.base is None:
        problems.add(
            spec.loc, path, "a strategy needs 'base' (single_device or parallel) or 'extends'"
        )
    if (
        parent is not None
        and spec.base is not None
        and spec.extends is not None
        and spec.base != parent.base
    ):
        problems.add(
            _field_loc(spec, "base"),
            f"{path}.base",
            f"base {spec.base!r} contradicts the parent {parent.name!r}, whose base is {parent.base!r}",
        )

    def pick(key: str, default: Any) -> Any:
        value = getattr(spec, key)
        if value is not None:
            return value
        return getattr(parent, key) if parent is not None else default

    wrapper = pick("wrapper", "none")
    launcher = pick("launcher", "none")
    allowed_bases, wrapper_options = WRAPPERS[wrapper]
    if base not in allowed_bases:
        problems.add(
            _field_loc(spec, "wrapper"),
            f"{path}.wrapper",
            f"wrapper {wrapper!r} works with base {one_of(sorted(allowed_bases))}, not {base!r}",
        )
    if base != "parallel" and launcher != "none":
        problems.add(
            _field_loc(spec, "launcher"),
            f"{path}.launcher",
            f"a {base} strategy runs in the calling process; launcher must be 'none', "
            f"found {launcher!r}",
        )

    # Backend: 'auto' -> None (from the accelerator); a name; or an inline declaration.
    backend: Backend | None
    if spec.backend is None:
        backend = parent.backend if parent else None
    elif isinstance(spec.backend, Backend):
        backend = catalog.backends.get(spec.backend.name)
    elif spec.backend == "auto":
        backend = None
    else:
        backend = _backend_ref(
            catalog, problems, spec.backend, _field_loc(spec, "backend"), f"{path}.backend"
        )

    precision = spec.precision
    parent_default = parent.default_precision if parent else None
    parent_supported = parent.supported_precisions if parent else PRECISIONS
    default_precision = precision.default if precision and precision.default else parent_default
    supported = precision.supported if precision and precision.supported else parent_supported
    if precision is not None:
        _check_precision_defaults(
            problems, precision, f"{path}.precision", default_precision, supported
        )

    cluster = pick("cluster", ())
    for index, env in enumerate(cluster):
        resolved_env = catalog.environments.get(env)
        if resolved_env is None:
            problems.add(
                _field_loc(spec, "cluster", f"cluster[{index}]"),
                f"{path}.cluster[{index}]",
                f"no cluster environment named {env!r}{did_you_mean(env, catalog.environments)}; "
                "cluster environments: "
                f"{_listing(n for n, e in catalog.environments.items() if not e.abstract)}",
            )
        elif resolved_env.abstract:
            problems.add(
                _field_loc(spec, "cluster", f"cluster[{index}]"),
                f"{path}.cluster[{index}]",
                f"cluster environment {env!r} is abstract and can never be detected",
            )
    if base == "parallel" and not spec.abstract and not cluster:
        problems.add(
            spec.loc,
            f"{path}.cluster",
            "a parallel strategy needs at least one cluster environment",
        )

    accelerators = pick("accelerators", tuple(catalog.accelerators))
    for index, accelerator in enumerate(accelerators):
        if accelerator not in catalog.accelerators:
            problems.add(
                _field_loc(spec, "accelerators", f"accelerators[{index}]"),
                f"{path}.accelerators[{index}]",
                f"no accelerator named {accelerator!r}"
                f"{did_you_mean(accelerator, catalog.accelerators)}; "
                f"accelerators: {_listing(catalog.accelerators)}",
            )

    options = dict(parent.options) if parent else {}
    for option_name, option in (spec.options or {}).items():
        _check_option(problems, spec, path, option_name, option, base, wrapper_options)
        options[option_name] = option

    for alias, preset in spec.aliases.items():
        alias_path = f"{path}.aliases.{alias}"
        alias_loc = _field_loc(spec, "aliases", f"aliases.{alias}")
        if spec.abstract:
            problems.add(alias_loc, alias_path, "an abstract strategy cannot have registry aliases")
        for key, value in preset.items():
            key_loc = _field_loc(spec, "aliases", f"aliases.{alias}.{key}", f"aliases.{alias}")
            if key not in options:
                problems.add(
                    key_loc,
                    f"{alias_path}.{key}",
                    f"{spec.name!r} has no option {key!r}{did_you_mean(key, options)}; options: "
                    f"{', '.join(options) or 'none'}",
                )
            elif not _option_value_ok(options[key], value):
                problems.add(
                    key_loc,
                    f"{alias_path}.{key}",
                    f"{'null' if value is None else repr(value)} does not fit option {key!r} "
                    f"({_option_summary(options[key])})",
                )

    requires = pick("requires", ())
    hooks = pick("hooks", None)
    if spec.hooks is not None and spec.hooks.endswith(".py"):
        hooks_file = Path(entry.source.hooks_dir, spec.hooks)
        if not hooks_file.is_file():
            problems.add(
                _field_loc(spec, "hooks"),
                f"{path}.hooks",
                f"hooks file {spec.hooks!r} does not exist next to {entry.source.path}",
            )
    return Strategy(
        spec=spec,
        source=entry.source,
        name=spec.name,
        class_name=spec.class_name,
        module=spec.module or spec.name,
        description=spec.description,
        abstract=spec.abstract,
        base=base,
        parent=parent,
        wrapper=wrapper,
        launcher=launcher,
        backend=backend,
        default_precision=default_precision,
        supported_precisions=tuple(supported),
        cluster=tuple(cluster),
        accelerators=tuple(accelerators),
        options=options,
        aliases=dict(spec.aliases),
        requires=tuple(requires),
        hooks=hooks,
    )


def _option_summary(option: Option) -> str:
    text = " or ".join(option.types)
    if option.default is None:
        text += " or null"
    if option.choices:
        text += f", one of {one_of(option.choices)}"
    return text


def _option_value_ok(option: Option, value: Any) -> bool:
    if value is None:
        # Only options that default to None take it: their annotation says `| None`.
        return option.default is None or "any" in option.types
    if not value_fits(value, option.types):
        return False
    return not option.choices or value in option.choices


def _check_option(
    problems: _Problems,
    spec: StrategySpec,
    path: str,
    name: str,
    option: Option,
    base: str,
    wrapper_options: dict[str, tuple[str, ...]],
) -> None:
    opt_path = f"{path}.options.{name}"
    if name in reserved_option_names():
        problems.add(
            option.loc,
            opt_path,
            f"{name!r} is reserved: the core strategy classes use the name (as a constructor "
            "argument, method or attribute); pick another name",
        )
    if keyword.iskeyword(name):
        problems.add(option.loc, opt_path, f"{name!r} is a Python keyword")
    if option.default is not None and not value_fits(option.default, option.types):
        problems.add(
            option.locs.get("default", option.loc),
            f"{opt_path}.default",
            f"default {option.default!r} is not of type {' or '.join(option.types)}",
        )
    if isinstance(option.default, dict | list):
        problems.add(
            option.locs.get("default", option.loc),
            f"{opt_path}.default",
            "an option cannot default to a mapping or a list (one shared mutable default "
            "would leak between strategies); default to null and fill it in at run time",
        )
    if option.choices is not None:
        for choice in option.choices:
            if not value_fits(choice, option.types):
                problems.add(
                    option.locs.get("choices", option.loc),
                    f"{opt_path}.choices",
                    f"choice {choice!r} is not of type {' or '.join(option.types)}",
                )
        if option.default is not None and option.default not in option.choices:
            problems.add(
                option.locs.get("default", option.loc),
                f"{opt_path}.default",
                f"default {option.default!r} is not among the choices {one_of(option.choices)}",
            )
    known = dict(wrapper_options)
    if base == "parallel":
        known.update(PARALLEL_OPTIONS)
    if name in known and not set(option.types) <= set(known[name]):
        problems.add(
            option.locs.get("type", option.loc),
            f"{opt_path}.type",
            f"the core reads {name!r} as {' or '.join(known[name])}; found {' or '.join(option.types)}",
        )


def _spec_path(item: Any) -> str:
    """The field path of a resolved entity in its file, e.g. 'strategies[2]'."""
    spec_file = item.source.spec
    if isinstance(item, Accelerator):
        return "accelerator"
    family = {
        Strategy: "strategies",
        PrecisionPlugin: "precision_plugins",
        ClusterEnvironment: "cluster_environments",
    }[type(item)]
    for index, spec in enumerate(getattr(spec_file, family)):
        if spec is item.spec:
            return f"{family}[{index}]"
    return family  # pragma: no cover - every entity comes from its source file


def _check_names(catalog: Catalog, problems: _Problems) -> None:
    """Registry names, class names and modules must be unique across everything generated."""
    registry: dict[str, tuple[Location, str]] = {}
    for strategy in catalog.strategies.values():
        for alias in strategy.registry_names:
            loc = (
                _field_loc(strategy.spec, "aliases", f"aliases.{alias}")
                if alias != strategy.name
                else _field_loc(strategy.spec, "name")
            )
            if alias in registry:
                other_loc, owner = registry[alias]
                problems.add(
                    loc,
                    (
                        f"{_spec_path(strategy)}.name"
                        if alias == strategy.name
                        else f"{_spec_path(strategy)}.aliases.{alias}"
                    ),
                    f"registry name {alias!r} is already taken by strategy {owner!r}",
                    related=other_loc,
                )
            else:
                registry[alias] = (loc, strategy.name)
    classes: dict[str, tuple[Location, str]] = {}
    modules: dict[tuple[str, str], tuple[Location, str]] = {}
    constants = {name.upper() for name in catalog.backends}  # backends.py's names
    families: list[tuple[str, Iterable[Any]]] = [
        ("strategies", catalog.strategies.values()),
        ("accelerators", catalog.accelerators.values()),
        ("precision", catalog.precision_plugins.values()),
        ("environments", catalog.environments.values()),
    ]
    for family, items in families:
        for item in items:
            loc = _field_loc(item.spec, "class_name")
            if item.class_name in RESERVED_CLASS_NAMES or item.class_name in constants:
                problems.add(
                    loc,
                    f"{_spec_path(item)}.class_name",
                    f"{item.class_name!r} is reserved: generated modules import a core or "
                    "typing name of that name; pick another class name",
                )
            elif item.class_name in classes:
                other_loc, owner = classes[item.class_name]
                problems.add(
                    loc,
                    f"{_spec_path(item)}.class_name",
                    f"class {item.class_name!r} is already generated for {owner!r}",
                    related=other_loc,
                )
            else:
                classes[item.class_name] = (loc, item.name)
            key = (family, item.module)
            if key in modules:
                other_loc, owner = modules[key]
                problems.add(
                    _field_loc(item.spec, "module") if "module" in item.spec.locs else loc,
                    f"{_spec_path(item)}.module",
                    f"module {family}/{item.module}.py is already generated for {owner!r}",
                    related=other_loc,
                )
            else:
                modules[key] = (loc, item.name)


def _check_precision_coverage(catalog: Catalog, problems: _Problems) -> None:
    """Every precision a strategy accepts on an accelerator must have a plugin to serve it,
    and the one it runs in by default must be accepted by both."""
    for strategy in catalog.strategies.values():
        if strategy.abstract:
            continue
        for accelerator_name in strategy.accelerators:
            accelerator = catalog.accelerators[accelerator_name]
            on_device = accelerator.spec.precision.supported or PRECISIONS
            default = strategy.default_precision or accelerator.spec.precision.default or "32-true"
            if default not in on_device or default not in strategy.supported_precisions:
                source = "its own" if strategy.spec.precision else "inherited"
                if strategy.default_precision is None:
                    source = f"accelerator {accelerator_name!r}'s"
                problems.add(
                    _field_loc(strategy.spec, "precision"),
                    f"{_spec_path(strategy)}.precision.default",
                    f"strategy {strategy.name!r} runs in {default!r} by default ({source} "
                    f"default) on {accelerator_name!r}, but {accelerator_name!r} accepts "
                    f"{one_of(on_device)} and the strategy {one_of(strategy.supported_precisions)}"
                    "; set precision.default to one that both accept",
                )
            for mode in strategy.supported_precisions:
                if (
                    mode in on_device
                    and catalog.select_precision(strategy, accelerator_name, mode) is None
                ):
                    problems.add(
                        _field_loc(strategy.spec, "precision"),
                        f"{_spec_path(strategy)}.precision",
                        f"no precision plugin serves {mode!r} for strategy {strategy.name!r} on "
                        f"{accelerator_name!r}; declare one or drop {mode!r} from 'supported'",
                    )


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
    "resolve",
    "value_fits",
    "walk_options",
]
