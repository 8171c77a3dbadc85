"""Checks on the resolved catalog, and the names specs may not use.

Everything here reports into a ``Problems`` list instead of raising, so that one run names
every problem of every file.
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stratcore.contract import (
    CONSTRUCTOR_ARGUMENT_NAMES,
    DEFAULT_PRECISION,
    PARALLEL_OPTIONS,
    PRECISIONS,
    WRAPPERS,
    core_read_options,
    value_fits,
)
from stratcore.wording import did_you_mean

from ..spec.errors import Location, SpecError, SpecProblem, one_of
from ..spec.model import Option, StrategySpec
from .catalog import (
    BASE_SPECS,
    Accelerator,
    Catalog,
    ClusterEnvironment,
    PrecisionPlugin,
    Source,
    Strategy,
)
from .reserved_names import (
    CONSTRUCTOR_NAMES,
    RESERVED_CLASS_NAMES,
    class_name_problem,
    module_name_problem,
)
from .runtime_facts import strategy_attributes

#: Names an option may not take besides the core's own attributes (see ``reserved_option_names``):
#: constructor arguments of the core and keyword arguments of get_strategy.
RESERVED_ARGUMENTS = CONSTRUCTOR_ARGUMENT_NAMES | {
    "self",
    "strategy",
    "precision",
    "devices",
    "sync_batchnorm",
}


def reserved_option_names() -> frozenset[str]:
    """Names an option may not take: an option is stored as an instance attribute, so a name
    the core's strategy classes use would shadow one of their methods or facts; and it is a
    parameter of the generated constructor, which uses ``CONSTRUCTOR_NAMES`` itself (any other
    builtin, ``compile`` say, is no name its body uses)."""
    return RESERVED_ARGUMENTS | CONSTRUCTOR_NAMES | (strategy_attributes() - core_read_options())


def _reserved_option_reason(name: str) -> str:
    if name in CONSTRUCTOR_NAMES:
        return "the generated constructor uses the name itself (self, *args, **kwargs, super())"
    return "the core strategy classes use the name (as a constructor argument, method or attribute)"


def has_nan(value: Any) -> bool:
    """Whether ``value`` is, or holds, a float NaN (equal to nothing, itself included)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(has_nan(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_nan(v) for v in value)
    return False


NAN_PROBLEM = (
    ".nan equals nothing, itself included: no value could be told to be the default or a "
    "choice; give a number"
)


class Problems:
    """The problems found so far; raised together as one SpecError."""

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


def listing(names: Iterable[str], limit: int = 12) -> str:
    """Names for an 'allowed are ...' part of a message, sorted, the list cut at ``limit``."""
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:limit])
    return shown + (f" and {len(ordered) - limit} more" if len(ordered) > limit else "")


def field_loc(spec: Any, key: str, *more: str) -> Location:
    """Where ``key`` (or the first of ``more`` found, most precise first) is in the spec."""
    for candidate in (*more, key):
        if candidate in spec.locs:
            location: Location = spec.locs[candidate]
            return location
    location = spec.loc
    return location


def check_precision_defaults(
    problems: Problems, spec: Any, path: str, default: str | None, supported: tuple[str, ...]
) -> None:
    if default is not None and default not in supported:
        problems.add(
            field_loc(spec, "default"),
            f"{path}.default",
            f"default precision {default!r} is not among the supported ones: {one_of(supported)}",
        )


def check_precision_ambiguity(catalog: Catalog, problems: Problems) -> None:
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
                    field_loc(b.spec, "modes"),
                    f"{spec_path(b)}.modes",
                    f"serves {one_of(sorted(shared))} in the same scope as {a.name!r}; narrow "
                    "one of them with 'wrappers' or 'accelerators'",
                    related=field_loc(a.spec, "modes"),
                    related_label=f"where {a.name!r} serves {one_of(sorted(shared))}",
                )


def option_summary(option: Option) -> str:
    text = " or ".join(option.types)
    if option.default is None:
        text += " or null"
    if option.choices:
        text += f", one of {one_of(option.choices)}"
    return text


def option_value_ok(option: Option, value: Any) -> bool:
    if value is None:
        # Only options that default to None take it: their annotation says `| None`.
        return option.default is None or "any" in option.types
    if not value_fits(value, option.types):
        return False
    return not option.choices or value in option.choices


def check_option(
    problems: Problems,
    spec: StrategySpec,
    path: str,
    name: str,
    option: Option,
    base: str,
    wrapper: str,
) -> None:
    opt_path = f"{path}.options.{name}"
    if name in reserved_option_names():
        problems.add(
            option.loc,
            opt_path,
            f"{name!r} is reserved: {_reserved_option_reason(name)}; pick another name",
        )
    for key, value in (("default", option.default), ("choices", option.choices)):
        if has_nan(value):
            problems.add(option.locs.get(key, option.loc), f"{opt_path}.{key}", NAN_PROBLEM)
    if keyword.iskeyword(name):
        problems.add(option.loc, opt_path, f"{name!r} is a Python keyword")
    if option.default is not None and option.types and not value_fits(option.default, option.types):
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
    known = dict(WRAPPERS[wrapper].options)
    if base == "parallel":
        known.update(PARALLEL_OPTIONS)
    if name in known and not set(option.types) <= set(known[name]):
        problems.add(
            option.locs.get("type", option.loc),
            f"{opt_path}.type",
            f"the core reads {name!r} as {' or '.join(known[name])}; found {' or '.join(option.types)}",
        )


def spec_path(item: Any) -> str:
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


def check_names(catalog: Catalog, problems: Problems) -> None:
    """Registry names, class names and modules must be unique across everything generated."""
    registry: dict[str, tuple[Location, str]] = {}
    for strategy in catalog.strategies.values():
        for alias in strategy.registry_names:
            loc = (
                field_loc(strategy.spec, "aliases", f"aliases.{alias}")
                if alias != strategy.name
                else field_loc(strategy.spec, "name")
            )
            if alias in registry:
                other_loc, owner = registry[alias]
                problems.add(
                    loc,
                    (
                        f"{spec_path(strategy)}.name"
                        if alias == strategy.name
                        else f"{spec_path(strategy)}.aliases.{alias}"
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
            loc = field_loc(item.spec, "class_name")
            if item.class_name in RESERVED_CLASS_NAMES or item.class_name in constants:
                reason = (
                    class_name_problem(item.class_name)
                    or "generated modules import a backend constant of that name"
                )
                problems.add(
                    loc,
                    f"{spec_path(item)}.class_name",
                    f"{item.class_name!r} is reserved: {reason}; pick another class name",
                )
            elif item.class_name in classes:
                other_loc, owner = classes[item.class_name]
                problems.add(
                    loc,
                    f"{spec_path(item)}.class_name",
                    f"class {item.class_name!r} is already generated for {owner!r}",
                    related=other_loc,
                )
            else:
                classes[item.class_name] = (loc, item.name)
            key = (family, item.module)
            if key in modules:
                other_loc, owner = modules[key]
                problems.add(
                    field_loc(item.spec, "module") if "module" in item.spec.locs else loc,
                    f"{spec_path(item)}.module",
                    f"module {family}/{item.module}.py is already generated for {owner!r}",
                    related=other_loc,
                )
            else:
                modules[key] = (loc, item.name)


def check_precision_coverage(catalog: Catalog, problems: Problems) -> None:
    """Every precision a strategy accepts on an accelerator must have a plugin to serve it,
    and the one it runs in by default must be accepted by both."""
    for strategy in catalog.strategies.values():
        if strategy.abstract:
            continue
        for accelerator_name in strategy.accelerators:
            accelerator = catalog.accelerators[accelerator_name]
            on_device = accelerator.spec.precision.supported or PRECISIONS
            default = (
                strategy.default_precision
                or accelerator.spec.precision.default
                or DEFAULT_PRECISION
            )
            if default not in on_device or default not in strategy.supported_precisions:
                source = "its own" if strategy.spec.precision else "inherited"
                if strategy.default_precision is None:
                    source = f"accelerator {accelerator_name!r}'s"
                problems.add(
                    field_loc(strategy.spec, "precision"),
                    f"{spec_path(strategy)}.precision.default",
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
                        field_loc(strategy.spec, "precision"),
                        f"{spec_path(strategy)}.precision",
                        f"no precision plugin serves {mode!r} for strategy {strategy.name!r} on "
                        f"{accelerator_name!r}; declare one or drop {mode!r} from 'supported'",
                    )


# --- strategies ----------------------------------------------------------------------------------


def check_strategy_base(
    problems: Problems, spec: StrategySpec, path: str, base: str, parent: Strategy | None
) -> None:
    if spec.name in BASE_SPECS and base != spec.name:
        problems.add(
            field_loc(spec, "base"),
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
            field_loc(spec, "base"),
            f"{path}.base",
            f"base {spec.base!r} contradicts the parent {parent.name!r}, whose base is {parent.base!r}",
        )


def check_wrapper_launcher(
    problems: Problems, spec: StrategySpec, path: str, base: str, wrapper: str, launcher: str
) -> None:
    allowed_bases = WRAPPERS[wrapper].bases
    if base not in allowed_bases:
        problems.add(
            field_loc(spec, "wrapper"),
            f"{path}.wrapper",
            f"wrapper {wrapper!r} works with base {one_of(sorted(allowed_bases))}, not {base!r}",
        )
    if base != "parallel" and launcher != "none":
        problems.add(
            field_loc(spec, "launcher"),
            f"{path}.launcher",
            f"a {base} strategy runs in the calling process; launcher must be 'none', "
            f"found {launcher!r}",
        )


def check_cluster(
    catalog: Catalog,
    problems: Problems,
    spec: StrategySpec,
    path: str,
    base: str,
    cluster: tuple[str, ...],
) -> None:
    for index, env in enumerate(cluster):
        resolved_env = catalog.environments.get(env)
        if resolved_env is None:
            problems.add(
                field_loc(spec, "cluster", f"cluster[{index}]"),
                f"{path}.cluster[{index}]",
                f"no cluster environment named {env!r}{did_you_mean(env, catalog.environments)}; "
                "cluster environments: "
                f"{listing(n for n, e in catalog.environments.items() if not e.abstract)}",
            )
        elif resolved_env.abstract:
            problems.add(
                field_loc(spec, "cluster", f"cluster[{index}]"),
                f"{path}.cluster[{index}]",
                f"cluster environment {env!r} is abstract and can never be detected",
            )
    if spec.cluster is not None:
        _check_cluster_order(catalog, problems, spec, path, cluster)
    if base == "parallel" and not spec.abstract and not cluster:
        problems.add(
            spec.loc,
            f"{path}.cluster",
            "a parallel strategy needs at least one cluster environment",
        )


def _check_cluster_order(
    catalog: Catalog, problems: Problems, spec: StrategySpec, path: str, cluster: tuple[str, ...]
) -> None:
    """An environment whose processes carry another's variables too (its ``runs_inside``) must
    come before that one, or the other would be detected in its place."""
    for index, name in enumerate(cluster):
        env = catalog.environments.get(name)
        for outer in (env.values.get("runs_inside") or ()) if env is not None else ():
            if outer in cluster[:index]:
                problems.add(
                    field_loc(spec, "cluster", f"cluster[{index}]"),
                    f"{path}.cluster[{index}]",
                    f"cluster environment {name!r} runs inside {outer!r}, whose variables its "
                    f"processes carry too: list it before {outer!r}",
                )


def check_runs_inside(
    catalog: Catalog, problems: Problems, env: ClusterEnvironment, path: str
) -> None:
    """Every environment a ``runs_inside`` list names exists and is not the environment
    itself."""
    for index, outer in enumerate(env.values.get("runs_inside") or ()):
        if outer == env.name or outer not in catalog.environments:
            known = [n for n, e in catalog.environments.items() if not e.abstract and n != env.name]
            problems.add(
                field_loc(env.spec, "runs_inside", f"runs_inside[{index}]"),
                f"{path}.runs_inside[{index}]",
                f"{outer!r} is not another cluster environment{did_you_mean(outer, known)}; "
                f"cluster environments: {listing(known)}",
            )


def check_accelerators(
    catalog: Catalog, problems: Problems, spec: Any, path: str, accelerators: Iterable[str]
) -> None:
    for index, accelerator in enumerate(accelerators):
        if accelerator not in catalog.accelerators:
            problems.add(
                field_loc(spec, "accelerators", f"accelerators[{index}]"),
                f"{path}.accelerators[{index}]",
                f"no accelerator named {accelerator!r}"
                f"{did_you_mean(accelerator, catalog.accelerators)}; "
                f"accelerators: {listing(catalog.accelerators)}",
            )


def check_aliases(
    problems: Problems, spec: StrategySpec, path: str, options: dict[str, Option]
) -> None:
    for alias, preset in spec.aliases.items():
        alias_path = f"{path}.aliases.{alias}"
        alias_loc = field_loc(spec, "aliases", f"aliases.{alias}")
        if spec.abstract:
            problems.add(alias_loc, alias_path, "an abstract strategy cannot have registry aliases")
        for key, value in preset.items():
            key_loc = field_loc(spec, "aliases", f"aliases.{alias}.{key}", f"aliases.{alias}")
            if key not in options:
                problems.add(
                    key_loc,
                    f"{alias_path}.{key}",
                    f"{spec.name!r} has no option {key!r}{did_you_mean(key, options)}; options: "
                    f"{', '.join(options) or 'none'}",
                )
            elif has_nan(value):
                problems.add(key_loc, f"{alias_path}.{key}", NAN_PROBLEM)
            elif not option_value_ok(options[key], value):
                problems.add(
                    key_loc,
                    f"{alias_path}.{key}",
                    f"{'null' if value is None else repr(value)} does not fit option {key!r} "
                    f"({option_summary(options[key])})",
                )


def check_hooks_file(problems: Problems, spec: StrategySpec, path: str, source: Source) -> None:
    hooks = spec.hooks
    if hooks is None:
        return
    if not hooks.endswith(".py"):  # a module path, imported as it is: ``import pkg.hooks``
        for part in hooks.split("."):
            problem = module_name_problem(part)
            if problem is not None:
                problems.add(
                    field_loc(spec, "hooks"),
                    f"{path}.hooks",
                    f"hooks module {hooks!r} is imported by name: {problem}",
                )
                return
        return
    module = Path(hooks).stem.replace("-", "_")
    problem = module_name_problem(module)
    if problem is not None:
        problems.add(
            field_loc(spec, "hooks"),
            f"{path}.hooks",
            f"hooks file {hooks!r} becomes the module hooks/{module}.py, imported by name: "
            f"{problem}; rename the file",
        )
    elif not Path(source.hooks_dir, hooks).is_file():
        there = Path(source.hooks_dir, hooks).exists()
        problems.add(
            field_loc(spec, "hooks"),
            f"{path}.hooks",
            f"hooks file {hooks!r} {'is not a regular file' if there else 'does not exist'} "
            f"next to {source.path}",
        )
    elif (
        not Path(source.hooks_dir, hooks).resolve().is_relative_to(Path(source.hooks_dir).resolve())
    ):
        problems.add(
            field_loc(spec, "hooks"),
            f"{path}.hooks",
            f"hooks file {hooks!r} is a symbolic link out of the folder of {source.path}; a "
            "hooks file is read only where it lies beside its spec",
        )


def check_condition(problems: Problems, condition: Any, path: str) -> None:
    """A condition that names variables only under ``not_equal`` never holds (it needs one
    that is set: ``all_set`` or ``any_set``; or ``always``)."""
    if condition is None or condition.always or condition.all_set or condition.any_set:
        return
    if condition.not_equal:
        problems.add(
            condition.loc,
            path,
            "not_equal alone never holds: a condition holds only where a variable of all_set "
            "or any_set is set (or with always: true); add the variable that must be set",
        )
