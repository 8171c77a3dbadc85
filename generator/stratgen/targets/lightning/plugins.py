"""The Lightning target: plugins for Lightning's Trainer and Fabric from the same specs.

Each strategy of a spec whose base and wrapper have a Lightning counterpart
(``stratcore.lightning.contract.STRATEGY_BASES``), and whose registry name Lightning does not
define itself, becomes a subclass of that Lightning strategy, once for ``lightning.pytorch``
and once for ``lightning.fabric``; its devices become Lightning accelerators and its own
cluster environments Lightning cluster environments. The generated classes only name things:
the spec's class of the stratlib target (``spec``, which carries every fact), the Lightning
base class (the behaviour), and ``stratcore.lightning``'s adapter (the glue between them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratcore.lightning.contract import (
    ACCELERATOR_NAMES,
    ADAPTERS,
    DEVICE_LIMITS,
    ENVIRONMENTS,
    ENVIRONMENTS_MODULE,
    FRAMEWORKS,
    INDEXED_DEVICES_ONLY,
    LAUNCHER_PRESETS,
    REGISTER,
    REGISTRIES,
    REQUIREMENT,
    STRATEGY_NAMES,
    accelerator_base,
    imported_names,
    strategy_adapter,
    strategy_base,
)

from ...codegen.python_source import (
    DocSource,
    Imports,
    PyClass,
    PyModule,
    docstring,
    first_sentence,
    literal,
)
from ...codegen.templating import RenderedFile, Renderer, describe_sources, header
from ...resolve.catalog import Accelerator, Catalog, ClusterEnvironment, Source, Strategy
from ...resolve.checks import field_loc, spec_path
from ...resolve.reserved_names import module_name_problem
from ...resolve.runtime_facts import processes_per_node
from ...resolve.selection import Selection as PackageSelection
from ...spec.errors import Location, SpecError, SpecProblem

WHAT = {"pytorch": "Lightning's Trainer", "fabric": "Lightning Fabric"}


@dataclass
class PluginStrategy:
    """A strategy as the Lightning target renders it for one framework."""

    strategy: Strategy
    lightning_base: str
    #: (registry name, constructor arguments it stands for), the names Lightning lacks.
    names: list[tuple[str, dict[str, Any]]]
    #: Cluster environments in detection order: (name, Lightning class or None if generated).
    environments: list[tuple[str, str | None]]


@dataclass
class Selection:
    """What of a catalog the Lightning target renders for one framework."""

    strategies: list[PluginStrategy] = field(default_factory=list)
    accelerators: list[Accelerator] = field(default_factory=list)
    environments: list[ClusterEnvironment] = field(default_factory=list)


def select(catalog: Catalog, strategy_names: Iterable[str], framework: str) -> Selection:
    """The strategies of ``strategy_names`` that Lightning lacks (by their registry name, in
    either framework) and whose base and wrapper have a Lightning counterpart that accepts one
    of their accelerators, with the accelerators and cluster environments they need."""
    chosen = Selection()
    taken = STRATEGY_NAMES[framework]
    lightnings_own = frozenset().union(*STRATEGY_NAMES.values())
    for name in strategy_names:
        strategy = catalog.strategies[name]
        if strategy.abstract or strategy.name in lightnings_own:
            continue  # Lightning has this strategy itself (perhaps under fewer aliases)
        base = strategy_base(framework, strategy.base, strategy.wrapper)
        if base is None:
            continue
        accepted = DEVICE_LIMITS.get(base, (None, ""))[0]
        if (
            accepted is not None
            and strategy.accelerators
            and accepted.isdisjoint(strategy.accelerators)
        ):
            continue  # Lightning's base refuses every accelerator the strategy runs on
        if base in INDEXED_DEVICES_ONLY and not any(
            a in catalog.accelerators and catalog.accelerators[a].spec.indexed
            for a in strategy.accelerators
        ):
            continue  # Lightning's base needs indexed devices, and the strategy has none
        launcher = LAUNCHER_PRESETS.get(strategy.launcher, {}) if base == "DDPStrategy" else {}
        names = [
            (registry_name, {**launcher, **preset})
            for registry_name, preset in [(strategy.name, {}), *strategy.aliases.items()]
            if registry_name not in taken
        ]
        if not names:
            continue
        environments: list[tuple[str, str | None]] = []
        for env_name in strategy.cluster:
            if env_name in ENVIRONMENTS:
                environments.append((env_name, ENVIRONMENTS[env_name]))
            elif env_name in catalog.environments:
                environments.append((env_name, None))
                env = catalog.environments[env_name]
                if env not in chosen.environments:
                    chosen.environments.append(env)
        chosen.strategies.append(PluginStrategy(strategy, base, names, environments))
        for accelerator_name in strategy.accelerators:
            accelerator = catalog.accelerators.get(accelerator_name)
            if (
                accelerator is not None
                and accelerator_name not in ACCELERATOR_NAMES
                and accelerator not in chosen.accelerators
            ):
                chosen.accelerators.append(accelerator)
    return chosen


def _doc(description: str, framework: str, base: str, source: str) -> DocSource:
    """A class docstring: the spec's first sentence, then where the behaviour comes from."""
    paragraphs = [
        f"{first_sentence(description)}, for {WHAT[framework]}.",
        f"Lightning's ``{base}``, configured with the facts of {source} (``spec``) through "
        f"``stratcore.lightning``.",
    ]
    return docstring(paragraphs, "    ", 92, 92)


def spec_modules(
    catalog: Catalog, selection: Selection, framework: str
) -> tuple[list[PyModule], list[tuple[str, str]]]:
    """One module per spec file (its accelerators and strategies for ``framework``), and the
    (module, class name) pairs the framework's ``__init__`` registers."""
    by_stem: dict[str, list[Any]] = {}
    for accelerator in selection.accelerators:
        by_stem.setdefault(accelerator.source.stem, []).append(accelerator)
    for plugin in selection.strategies:
        by_stem.setdefault(plugin.strategy.source.stem, []).append(plugin)
    modules: list[PyModule] = []
    exported: list[tuple[str, str]] = []
    lightning = FRAMEWORKS[framework]
    for stem, entries in sorted(by_stem.items()):
        module = stem.replace("-", "_")
        first = entries[0]
        _check_module_name(
            module, first.source if isinstance(first, Accelerator) else first.strategy.source
        )
        imports = Imports()
        imports.stdlib.add("from __future__ import annotations")
        classes: list[PyClass] = []
        source = (first.source if isinstance(first, Accelerator) else first.strategy.source).path
        for entry in entries:
            if isinstance(entry, Accelerator):
                base = accelerator_base(entry.spec.device_type or "")
                imports.third_party.add(f"from {lightning}.accelerators import {base}")
                imports.add_local(*ADAPTERS["accelerator"])
                imports.add_local("", "accelerators")
                classes.append(
                    PyClass(
                        entry.class_name,
                        [ADAPTERS["accelerator"][1], base],
                        _doc(entry.spec.description, framework, base, source),
                        [("spec", "", f"accelerators.{entry.class_name}")],
                    )
                )
            else:
                strategy = entry.strategy
                base = _base_name(entry.lightning_base, entries)
                alias = f" as {base}" if base != entry.lightning_base else ""
                imports.third_party.add(
                    f"from {lightning}.strategies import {entry.lightning_base}{alias}"
                )
                adapter = strategy_adapter(strategy.wrapper)
                imports.add_local(*adapter)
                imports.add_local("", "strategies")
                attributes = [("spec", "", f"strategies.{strategy.class_name}")]
                if entry.environments:
                    constant = environments_constant(strategy)
                    imports.add_local("lightning.environments", constant)
                    attributes.append(("environments", "", constant))
                classes.append(
                    PyClass(
                        strategy.class_name,
                        [adapter[1], base],
                        _doc(strategy.description, framework, entry.lightning_base, source),
                        attributes,
                    )
                )
        names = [c.name for c in classes]
        aliased = {e.lightning_base for e in entries if isinstance(e, PluginStrategy)}
        items = [e if isinstance(e, Accelerator) else e.strategy for e in entries]
        _check_no_shadowing(items, imported_names() - (aliased & set(names)))
        exported += [(module, name) for name in names]
        modules.append(
            PyModule(
                path=f"lightning/{framework}/{module}.py",
                source=f"{source} (Lightning target)",
                doc=_module_doc(names, framework, source),
                imports=imports,
                classes=classes,
                all_names=names,
            )
        )
    return modules, exported


def _check_module_name(module: str, source: Source) -> None:
    """A spec file's name becomes the name of its plugin module, which the framework's
    ``__init__`` imports by name."""
    problem = module_name_problem(module)
    if problem is not None:
        raise SpecError.single(
            Location(source.path),
            "",
            f"spec file name {Path(source.path).name!r} becomes the Lightning plugin module "
            f"lightning/<framework>/{module}.py: {problem}; rename the file",
        )


def _base_name(lightning_base: str, entries: list[Any]) -> str:
    """The name a module imports a Lightning strategy under: its own, or
    ``Lightning<Name>`` where a generated class of the module takes its name (the spec of
    Lightning's ModelParallelStrategy may name its class ModelParallelStrategy too)."""
    taken = {e.class_name if isinstance(e, Accelerator) else e.strategy.class_name for e in entries}
    return f"Lightning{lightning_base}" if lightning_base in taken else lightning_base


def _check_no_shadowing(items: list[Any], imported: frozenset[str]) -> None:
    """A generated class may not take the name of a Lightning class its module imports: the
    ``class_name`` of such an item (an accelerator, a strategy, a cluster environment) is
    refused where its spec writes it."""
    problems = [
        SpecProblem(
            field_loc(item.spec, "class_name"),
            f"{spec_path(item)}.class_name",
            f"class {item.class_name!r} would shadow Lightning's {item.class_name} in its "
            "Lightning plugin module; give it another class_name",
        )
        for item in items
        if item.class_name in imported
    ]
    if problems:
        raise SpecError(problems)


def _module_doc(names: list[str], framework: str, source: str) -> DocSource:
    return docstring([f"{', '.join(names)}: {source} for {WHAT[framework]}."])


def environments_constant(strategy: Strategy) -> str:
    """The constant of ``lightning/environments.py`` holding a strategy's environments, named
    after the strategy whose spec declares its ``cluster`` list (a strategy that inherits the
    list shares its parent's constant)."""
    while strategy.parent is not None and strategy.parent.cluster == strategy.cluster:
        strategy = strategy.parent
    return re.sub(r"\W", "_", strategy.name, flags=re.ASCII).upper() + "_ENVIRONMENTS"


def environments_module(
    catalog: Catalog, selections: Iterable[Selection], sources: str
) -> PyModule | None:
    """What the Trainer's and Fabric's plugins share (their ClusterEnvironment is the same
    class): Lightning cluster environments for the specs' own environments, and the
    environments each strategy detects, in its order."""
    chosen = list(selections)
    own = list({env.name: env for s in chosen for env in s.environments}.values())
    plugins = {p.strategy.name: p for s in chosen for p in s.strategies if p.environments}
    if not own and not plugins:
        return None
    imports = Imports()
    imports.stdlib.add("from __future__ import annotations")
    classes = []
    if own:
        imports.third_party.add(f"from {ENVIRONMENTS_MODULE} import ClusterEnvironment")
        imports.add_local(*ADAPTERS["environment"])
        imports.add_local("", "environments")
        classes = [
            PyClass(
                env.class_name,
                [ADAPTERS["environment"][1], "ClusterEnvironment"],
                docstring(
                    [first_sentence(env.description) + ", as a Lightning cluster environment."],
                    "    ",
                    first_width=93,
                    width=96,
                ),
                [("spec", "", f"environments.{env.class_name}")],
            )
            for env in own
        ]
        _check_no_shadowing(own, imported_names())
    tail = []
    # One constant per declared cluster list, shared by the strategies inheriting it.
    constants: list[str] = []
    for plugin in plugins.values():
        constant = environments_constant(plugin.strategy)
        if constant in constants:
            continue
        constants.append(constant)
        names = []
        for env_name, lightning_class in plugin.environments:
            if lightning_class is not None:
                imports.third_party.add(f"from {ENVIRONMENTS_MODULE} import {lightning_class}")
            names.append(lightning_class or catalog.environments[env_name].class_name)
        tail.append(f"{constant} = (" + "".join(f"{n}, " for n in names) + ")")
    return PyModule(
        path="lightning/environments.py",
        source=f"{sources} (Lightning target)",
        doc=docstring(
            [
                "What the plugins for the Trainer and for Fabric share: Lightning cluster "
                "environments of the specs' own schedulers, and the environments each strategy "
                "detects, in its order."
            ]
        ),
        imports=imports,
        classes=classes,
        tail=tail,
        all_names=[c.name for c in classes] + constants,
    )


def framework_init(
    selection: Selection, exported: list[tuple[str, str]], framework: str, sources: str
) -> PyModule:
    """``lightning/<framework>/__init__.py``: imports the plugins and registers them in the
    framework's accelerator and strategy registries."""
    lightning = FRAMEWORKS[framework]
    imports = Imports()
    imports.stdlib.add("from __future__ import annotations")
    registries = REGISTRIES[framework]
    imports.third_party.add(f"from {lightning}.accelerators import {registries[0]}")
    imports.third_party.add(f"from {lightning}.strategies import {registries[1]}")
    imports.add_local(*REGISTER)
    for module, name in exported:
        imports.add_local(f"lightning.{framework}.{module}", name)
    accelerators = "".join(f"{a.class_name}, " for a in selection.accelerators)
    entries = "".join(
        f"({literal(name)}, {plugin.strategy.class_name}, {literal(preset)}), "
        for plugin in selection.strategies
        for name, preset in plugin.names
    )
    body = [
        f"register({registries[0]}, {registries[1]}, accelerators=[{accelerators}], "
        f"strategies=[{entries}])"
    ]
    registered = ", ".join(
        f'"{name}"' for plugin in selection.strategies for name, _ in plugin.names
    )
    doc = (
        f"Plugins for {WHAT[framework]} generated from {sources}; importing this module "
        f"registers them ({registered or 'none'}) in Lightning's registries. "
        f"Needs {REQUIREMENT}."
    )
    return PyModule(
        path=f"lightning/{framework}/__init__.py",
        source=f"{sources} (Lightning target)",
        doc=docstring([doc]),
        imports=imports,
        classes=[],
        body=body,
        all_names=sorted(name for _, name in exported),
    )


def package_init(sources: str) -> PyModule:
    imports = Imports()
    doc = (
        "Plugins for Lightning generated from the same specs as this package: "
        "``.pytorch`` for the Trainer, ``.fabric`` for Fabric. Importing either registers its "
        "accelerators and strategies in Lightning's registries; this package itself imports "
        f"nothing of Lightning. Needs {REQUIREMENT}."
    )
    return PyModule(
        path="lightning/__init__.py",
        source=f"{sources} (Lightning target)",
        doc=docstring([doc]),
        imports=imports,
        classes=[],
    )


def modules(catalog: Catalog, strategy_names: Iterable[str], sources: str) -> list[PyModule]:
    """Every module of the Lightning target."""
    names = list(strategy_names)
    result = [package_init(sources)]
    selections = []
    for framework in FRAMEWORKS:
        selection = select(catalog, names, framework)
        spec_mods, exported = spec_modules(catalog, selection, framework)
        result += spec_mods
        result.append(framework_init(selection, exported, framework, sources))
        selections.append(selection)
    env_module = environments_module(catalog, selections, sources)
    if env_module is not None:
        result.append(env_module)
    return result


@dataclass
class TestCases:
    """What the generated tests of one spec file check: a row for each accelerator plugin and
    for each registry name of a strategy plugin, in each framework."""

    source: str
    #: (framework, accelerator class name)
    accelerators: list[tuple[str, str]] = field(default_factory=list)
    #: (framework, registry name, class name, preset literal or None, processes it trains on
    #: on the row of its first name, the strategy's own, else None)
    rows: list[tuple[str, str, str, str | None, int | None]] = field(default_factory=list)


def test_cases(catalog: Catalog, strategy_names: Iterable[str]) -> dict[str, TestCases]:
    """Spec file stem -> what its generated Lightning tests check."""
    names = list(strategy_names)
    cases: dict[str, TestCases] = {}
    for framework in FRAMEWORKS:
        selection = select(catalog, names, framework)
        for accelerator in selection.accelerators:
            case = cases.setdefault(accelerator.source.stem, TestCases(accelerator.source.path))
            case.accelerators.append((framework, accelerator.class_name))
        for plugin in selection.strategies:
            strategy = plugin.strategy
            case = cases.setdefault(strategy.source.stem, TestCases(strategy.source.path))
            processes = processes_per_node(strategy)
            case.rows.extend(
                (
                    framework,
                    name,
                    strategy.class_name,
                    literal(preset) if preset else None,
                    processes if index == 0 else None,
                )
                for index, (name, preset) in enumerate(plugin.names)
            )
    return cases


def render_plugins(
    catalog: Catalog,
    selection: PackageSelection,
    renderer: Renderer,
    package: str,
    package_dir: str,
    tests_dir: str,
) -> list[RenderedFile]:
    """The Lightning target: plugins for the Trainer and Fabric built on the package's
    classes, and their tests."""
    module_template = renderer.template("package/module.py.j2")
    sources = describe_sources(catalog.sources)
    files = []
    for module in modules(catalog, selection.strategies, sources):
        text = module_template.render(header=header(module.source), module=module)
        files.append(RenderedFile(f"{package_dir}/{module.path}", text, True))
    test_template = renderer.template("tests/test_lightning.py.j2")
    for stem, case in sorted(test_cases(catalog, selection.strategies).items()):
        used = {row[0] for row in case.rows} | {framework for framework, _ in case.accelerators}
        frameworks = [f for f in ("fabric", "pytorch") if f in used]
        text = test_template.render(
            header=header(f"{case.source} (Lightning target)"),
            case=case,
            package=package,
            frameworks=frameworks,
        )
        name = stem.replace("-", "_")
        files.append(RenderedFile(f"{tests_dir}/test_lightning_{name}.py", text, True))
    return files
