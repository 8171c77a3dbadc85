"""Resolution: spec files in, a ``Catalog`` out, with ``extends`` applied and every
reference checked (``checks`` and ``device_checks`` hold the checks themselves)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from stratcore.contract import ENVIRONMENT_VALUES, PRECISIONS
from stratcore.wording import did_you_mean

from ..spec.errors import Location
from ..spec.model import (
    AcceleratorSpec,
    ClusterEnvironmentSpec,
    PrecisionPluginSpec,
    StrategySpec,
    ValueSource,
)
from ..spec.parse import spec_fields
from . import device_checks
from .backends import backend_ref, resolve_backends, strategy_backend
from .catalog import (
    BASE_SPECS,
    ROOT_STRATEGY,
    Accelerator,
    Catalog,
    ClusterEnvironment,
    PrecisionPlugin,
    Source,
    Strategy,
)
from .checks import (
    Problems,
    check_accelerators,
    check_aliases,
    check_cluster,
    check_condition,
    check_hooks_file,
    check_names,
    check_option,
    check_precision_ambiguity,
    check_precision_coverage,
    check_precision_defaults,
    check_runs_inside,
    check_strategy_base,
    check_wrapper_launcher,
    field_loc,
    listing,
)
from .options import given_over, launcher_options, requirements, with_runtime_facts

E = TypeVar("E")


@dataclass
class _Entry(Generic[E]):
    spec: E
    source: Source
    path: str  # field path within its file, e.g. 'strategies[2]'


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
    sources: Iterable[Source], attribute: str, problems: Problems, what: str
) -> dict[str, _Entry[Any]]:
    """Gather the named entries of one family from every file, reporting name clashes."""
    entries: dict[str, _Entry[Any]] = {}
    for source in sources:
        for index, spec in enumerate(getattr(source.spec, attribute)):
            path = f"{attribute}[{index}]"
            if spec.name in entries:
                other = entries[spec.name]
                problems.add(
                    field_loc(spec, "name"),
                    f"{path}.name",
                    _clash(what, spec.name, source, other.source),
                    related=field_loc(other.spec, "name"),
                )
                continue
            entries[spec.name] = _Entry(spec, source, path)
    return entries


def _lineage(
    entries: Mapping[str, _Entry[Any]],
    parent_of: Any,
    problems: Problems,
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
                field_loc(first.spec, "extends"),
                f"{first.path}.extends",
                f"{plural} inherit from each other in a cycle: {' -> '.join(cycle)}",
                related=field_loc(entry.spec, "extends"),
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
                    field_loc(entry.spec, key),
                    f"{entry.path}.{key}",
                    f"no {what} named {parent!r}{did_you_mean(parent, entries)}; "
                    f"{plural} defined: {listing(n for n in entries if n != name)}",
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
    problems = Problems()
    catalog = Catalog(sources=sources)

    resolve_backends(catalog, problems)
    _resolve_accelerators(catalog, problems)
    _resolve_environments(catalog, problems)
    _resolve_precision_plugins(catalog, problems)
    _resolve_strategies(catalog, problems)
    problems.raise_if_any()
    check_names(catalog, problems)
    check_precision_coverage(catalog, problems)
    problems.raise_if_any()
    return catalog


def _resolve_accelerators(catalog: Catalog, problems: Problems) -> None:
    seen: dict[str, tuple[AcceleratorSpec, Source]] = {}
    for source in catalog.sources:
        spec = source.spec.accelerator
        if spec is None:
            continue
        if spec.name in seen:
            other, other_source = seen[spec.name]
            problems.add(
                field_loc(spec, "name"),
                "accelerator.name",
                _clash("accelerator", spec.name, source, other_source),
                related=field_loc(other, "name"),
            )
            continue
        seen[spec.name] = (spec, source)
        backend = backend_ref(
            catalog, problems, spec.backend, field_loc(spec, "backend"), "accelerator.backend"
        )
        supported = spec.precision.supported or PRECISIONS
        check_precision_defaults(
            problems, spec.precision, "accelerator.precision", spec.precision.default, supported
        )
        device_checks.check_accelerator(problems, spec, supported)
        if backend is not None:
            catalog.accelerators[spec.name] = Accelerator(
                spec=spec,
                source=source,
                name=spec.name,
                class_name=spec.class_name,
                module=spec.module or spec.name,
                backend=backend,
            )


def _resolve_environments(catalog: Catalog, problems: Problems) -> None:
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
        for key in ("detect", "creates_processes_externally"):
            if key in spec.locs:  # given here (an inherited one was checked where it was given)
                check_condition(problems, getattr(spec, key), f"{entry.path}.{key}")
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
    for name in order:
        if name in catalog.environments and catalog.environments[name].spec.runs_inside:
            check_runs_inside(catalog, problems, catalog.environments[name], entries[name].path)


def _resolve_precision_plugins(catalog: Catalog, problems: Problems) -> None:
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
            for key in ("kind", "wrappers", "accelerators", "grad_scaler")
        }
        values["modes"] = spec.modes
        for accelerator in values["accelerators"] or ():
            if accelerator not in catalog.accelerators:
                problems.add(
                    field_loc(spec, "accelerators"),
                    f"{entry.path}.accelerators",
                    f"no accelerator named {accelerator!r}"
                    f"{did_you_mean(accelerator, catalog.accelerators)}; "
                    f"accelerators: {listing(catalog.accelerators)}",
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
            requires=requirements(catalog, spec, parent, values["accelerators"] or ()),
        )
    check_precision_ambiguity(catalog, problems)


def _strategy_parent(spec: StrategySpec) -> tuple[str | None, str]:
    if spec.extends is not None:
        return spec.extends, "extends"
    if spec.base is not None and spec.base != spec.name:
        return spec.base, "base"
    if spec.name != ROOT_STRATEGY:
        return ROOT_STRATEGY, "name"
    return None, "name"


def _resolve_strategies(catalog: Catalog, problems: Problems) -> None:
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
    catalog: Catalog, problems: Problems, entry: _Entry[StrategySpec]
) -> Strategy | None:
    spec = entry.spec
    path = entry.path
    parent_name, _ = _strategy_parent(spec)
    parent = catalog.strategies.get(parent_name) if parent_name else None
    if parent_name is not None and parent is None:
        return None  # the parent failed; its problem is already reported

    base = spec.base or (parent.base if parent else ROOT_STRATEGY)
    check_strategy_base(problems, spec, path, base, parent)

    def pick(key: str, default: Any) -> Any:
        value = getattr(spec, key)
        if value is not None:
            return value
        return getattr(parent, key) if parent is not None else default

    wrapper = pick("wrapper", "none")
    launcher = pick("launcher", "none")
    check_wrapper_launcher(problems, spec, path, base, wrapper, launcher)
    default_precision, supported = _strategy_precision(problems, spec, path, parent)
    cluster = pick("cluster", ())
    check_cluster(catalog, problems, spec, path, base, cluster)
    accelerators = pick("accelerators", tuple(catalog.accelerators))
    check_accelerators(catalog, problems, spec, path, accelerators)

    options = dict(parent.options) if parent else {}
    from_launcher = launcher_options(launcher)
    options.update(from_launcher)
    for option_name, given in (spec.options or {}).items():
        if option_name in from_launcher:
            given = given_over(from_launcher[option_name], given)
        option = with_runtime_facts(problems, path, option_name, given, base, wrapper)
        check_option(problems, spec, path, option_name, option, base, wrapper)
        options[option_name] = option
    check_aliases(problems, spec, path, options)
    check_hooks_file(problems, spec, path, entry.source)
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
        backend=strategy_backend(catalog, problems, spec, path, parent),
        default_precision=default_precision,
        supported_precisions=tuple(supported),
        cluster=tuple(cluster),
        accelerators=tuple(accelerators),
        options=options,
        aliases=dict(spec.aliases),
        requires=requirements(catalog, spec, parent, accelerators),
        hooks=pick("hooks", None),
    )


def _strategy_precision(
    problems: Problems, spec: StrategySpec, path: str, parent: Strategy | None
) -> tuple[str | None, tuple[str, ...]]:
    """The default precision and the supported ones, each its own or the parent's."""
    precision = spec.precision
    parent_default = parent.default_precision if parent else None
    parent_supported = parent.supported_precisions if parent else PRECISIONS
    default = precision.default if precision and precision.default else parent_default
    supported = precision.supported if precision and precision.supported else parent_supported
    if precision is not None:
        check_precision_defaults(problems, precision, f"{path}.precision", default, supported)
    device_checks.check_no_probes(problems, precision, f"{path}.precision")
    return default, tuple(supported)
