"""Render a resolved catalog into the files of the package and its tests (the stratlib target).

``render_package`` returns them, path by path, before anything touches the disk. Generated
modules import the runtime, ``stratcore``, and check at import that it is the version they
were generated for.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from stratcore.contract import PACKAGE_EXPORTS, RAY_IMPORTS, REGISTRY_IMPORTS
from stratcore.version import RUNTIME_SERIES

from ...codegen import python_source
from ...codegen.python_source import PyModule, literal
from ...codegen.templating import RenderedFile, Renderer, describe_sources, header
from ...resolve.catalog import Catalog, Source, Strategy, test_module_name
from ...resolve.selection import Selection
from ...spec.errors import StratgenError
from . import component_modules, strategy_modules, test_tables


def render_package(
    catalog: Catalog,
    selection: Selection,
    renderer: Renderer,
    package: str,
    package_dir: str,
    tests_dir: str,
) -> list[RenderedFile]:
    """The package (a module for each entry of the selection, the hooks files the specs name,
    the family subpackages, the registry and the package's ``__init__``) and its tests."""
    files: list[RenderedFile] = []

    def emit(path: str, text: str, python: bool = True) -> None:
        files.append(RenderedFile(path, text, python))

    module_template = renderer.template("package/module.py.j2")

    def emit_module(make: Callable[[Any], PyModule], entry: Any) -> None:
        """The module ``make`` describes for a catalog entry."""
        module = make(entry)
        text = module_template.render(header=header(module.source), module=module)
        files.append(RenderedFile(f"{package_dir}/{module.path}", text, True))

    strategies = [catalog.strategies[n] for n in selection.strategies]
    accelerators = [catalog.accelerators[n] for n in selection.accelerators]
    plugins = [catalog.precision_plugins[n] for n in selection.precision_plugins]
    environments = [catalog.environments[n] for n in selection.environments]

    for strategy in strategies:
        emit_module(strategy_modules.strategy_module, strategy)
    for accelerator in accelerators:
        emit_module(component_modules.accelerator_module, accelerator)
    for plugin in plugins:
        emit_module(component_modules.precision_module, plugin)
    for env in environments:
        emit_module(component_modules.environment_module, env)
    backend_sources = [catalog.backend_sources[n] for n in selection.backends]
    backends = component_modules.backends_module(
        catalog, selection.backends, describe_sources(backend_sources)
    )
    emit(
        f"{package_dir}/{backends.path}",
        module_template.render(header=header(backends.source), module=backends),
    )
    _emit_hooks(strategies, package_dir, emit)

    families = [
        ("strategies", "Training strategies.", [(s.module, s.class_name) for s in strategies]),
        ("accelerators", "Accelerators.", [(a.module, a.class_name) for a in accelerators]),
        ("precision", "Precision plugins.", [(p.module, p.class_name) for p in plugins]),
        ("environments", "Cluster environments.", [(e.module, e.class_name) for e in environments]),
    ]
    family_template = renderer.template("package/family_init.py.j2")
    all_sources = describe_sources(catalog.sources)
    for family, doc, members in families:
        imports = [(m, [c]) for m, c in sorted(members)]
        emit(
            f"{package_dir}/{family}/__init__.py",
            family_template.render(
                header=header(all_sources),
                doc=doc,
                imports=imports,
                all_names=sorted(c for _, c in members),
            ),
        )

    emit(
        f"{package_dir}/registry.py",
        _registry(
            renderer,
            package,
            catalog,
            strategies,
            accelerators,
            plugins,
            environments,
            selection,
            all_sources,
        ),
    )
    emit(f"{package_dir}/ray.py", _ray_module(renderer, package, all_sources))
    emit(f"{package_dir}/__init__.py", _package_init(renderer, package, families, all_sources))
    emit(f"{package_dir}/py.typed", "", python=False)
    files.extend(_tests(renderer, catalog, selection, package, package_dir, tests_dir))
    return files


def _emit_hooks(strategies: list[Strategy], package_dir: str, emit: Any) -> None:
    hooks_files: dict[str, str] = {}
    origins: dict[str, Path] = {}
    for strategy in strategies:
        if strategy.hooks and strategy.hooks.endswith(".py") and strategy.spec.hooks:
            path = Path(strategy.source.hooks_dir) / strategy.hooks
            name = strategy_modules.hooks_module_name(strategy.hooks)
            if name in origins and origins[name].resolve() != path.resolve():
                raise StratgenError(
                    f"hooks files {origins[name]} and {path} would both become "
                    f"{package_dir}/hooks/{name}.py; rename one of them"
                )
            origins[name] = path
            text = _read_hooks(path)
            hooks_files[name] = (
                header(f"{strategy.source.path} (hooks: {strategy.hooks})") + "\n" + text
            )
    if hooks_files:
        emit(
            f"{package_dir}/hooks/__init__.py",
            header("hooks of the specs") + '\n"""Hand-written hooks named by specs."""\n',
        )
        for name, text in sorted(hooks_files.items()):
            emit(f"{package_dir}/hooks/{name}.py", text, python=False)


#: The most of a hooks file that is read: a module of functions is kilobytes.
MAX_HOOKS_BYTES = 1024 * 1024


def _read_hooks(path: Path) -> str:
    """A hooks file's text: a regular file of at most ``MAX_HOOKS_BYTES``, in UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO: no wait
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StratgenError(f"{path}: the hooks file is not a regular file")
            data = handle.read(MAX_HOOKS_BYTES + 1)
        if len(data) > MAX_HOOKS_BYTES:
            raise StratgenError(f"{path}: the hooks file is larger than {MAX_HOOKS_BYTES} bytes")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StratgenError(f"{path}: cannot read the hooks file: {exc}") from None


def _registry(
    renderer: Renderer,
    package: str,
    catalog: Catalog,
    strategies: list[Strategy],
    accelerators: list[Any],
    plugins: list[Any],
    environments: list[Any],
    selection: Selection,
    source: str,
) -> str:
    imports = python_source.Imports()
    imports.stdlib.add("from __future__ import annotations")
    entries = []
    for strategy in strategies:
        if strategy.abstract:
            continue
        imports.add_local(f"strategies.{strategy.module}", strategy.class_name)
        entries.append({"alias": strategy.name, "class_name": strategy.class_name, "preset": "{}"})
        for alias, preset in strategy.aliases.items():
            entries.append(
                {"alias": alias, "class_name": strategy.class_name, "preset": literal(preset)}
            )
    for accelerator in accelerators:
        imports.add_local(f"accelerators.{accelerator.module}", accelerator.class_name)
    selectable = [p for p in plugins if not p.abstract]
    for plugin in selectable:
        imports.add_local(f"precision.{plugin.module}", plugin.class_name)
    concrete_envs = [e for e in environments if not e.abstract]
    for env in concrete_envs:
        imports.add_local(f"environments.{env.module}", env.class_name)
    for name in selection.backends:
        imports.add_local("backends", strategy_modules.backend_constant(name))
    for module, names in REGISTRY_IMPORTS:
        for name in names:
            imports.add_local(module, name)
    return renderer.template("package/registry.py.j2").render(
        header=header(source),
        package=package,
        import_blocks=imports.lines("registry.py"),
        strategies=entries,
        # In order of preference for accelerator="auto" (Accelerator.preference).
        accelerators=[
            (a.name, a.class_name) for a in sorted(accelerators, key=lambda a: a.preference)
        ],
        precision_plugins=[p.class_name for p in selectable],
        environments=[(e.name, e.class_name) for e in concrete_envs],
        backends=[
            {"name": n, "constant": strategy_modules.backend_constant(n)}
            for n in selection.backends
        ],
    )


def _ray_module(renderer: Renderer, package: str, source: str) -> str:
    """``<package>/ray.py``: Ray Train's configurations for the package's strategies
    (``stratcore.ray.RayTrain`` on its registry)."""
    imports = python_source.Imports()
    imports.stdlib.add("from __future__ import annotations")
    for module, names in RAY_IMPORTS:
        for name in names:
            imports.add_local(module, name)
    imports.add_local("registry", "REGISTRY")
    return renderer.template("package/ray.py.j2").render(
        header=header(source), package=package, import_blocks=imports.lines("ray.py")
    )


def _package_init(renderer: Renderer, package: str, families: list[Any], source: str) -> str:
    imports = python_source.Imports()
    names: list[str] = ["get_strategy", "list_strategies"]
    for family, _, members in families:
        for _, class_name in members:
            imports.add_local(family, class_name)
            names.append(class_name)
    imports.add_local("registry", "get_strategy")
    imports.add_local("registry", "list_strategies")
    for module, exported in PACKAGE_EXPORTS:
        for name in exported:
            imports.add_local(module, name)
            names.append(name)
    return renderer.template("package/__init__.py.j2").render(
        header=header(source),
        package=package,
        runtime_version=RUNTIME_SERIES,
        import_blocks=imports.lines("__init__.py"),
        all_names=sorted(set(names)),
    )


def _tests(
    renderer: Renderer,
    catalog: Catalog,
    selection: Selection,
    package: str,
    package_dir: str,
    tests_dir: str,
) -> list[RenderedFile]:
    """One test module per spec file that declares anything selected, plus a conftest."""
    template = renderer.template("tests/test_spec.py.j2")
    chosen = {
        "strategies": set(selection.strategies),
        "accelerator": set(selection.accelerators),
        "precision_plugins": set(selection.precision_plugins),
        "cluster_environments": set(selection.environments),
    }
    files = []
    for source in catalog.sources:
        item = _test_module(template, catalog, selection, chosen, source, package, tests_dir)
        if item is not None:
            files.append(item)
    baselines = test_tables.baseline_expectations(catalog, selection.accelerators)
    strategies = [catalog.strategies[name] for name in selection.strategies]
    shared = renderer.template("tests/spec_facts.py.j2").render(
        header=header("the specs"),
        expectations=baselines,
        options=test_tables.shared_options(strategies),
        uses=[
            *(["PRECISIONS"] if any("=PRECISIONS" in e for _, e in baselines) else []),
            "Expectation",
        ],
    )
    files.append(RenderedFile(f"{tests_dir}/spec_facts.py", shared, True))
    package_parent = os.path.relpath(package_dir.rsplit("/", 1)[0] or ".", tests_dir)
    conftest = renderer.template("tests/conftest.py.j2").render(
        header=header("stratgen's test template"),
        package=package,
        package_parent=Path(package_parent).as_posix(),
    )
    files.append(RenderedFile(f"{tests_dir}/conftest.py", conftest, True))
    return files


def _test_module(
    template: jinja2.Template,
    catalog: Catalog,
    selection: Selection,
    chosen: dict[str, set[str]],
    source: Source,
    package: str,
    tests_dir: str,
) -> RenderedFile | None:
    """The test module of one spec file, if it declares anything selected."""
    spec = source.spec
    strategies = [
        catalog.strategies[s.name] for s in spec.strategies if s.name in chosen["strategies"]
    ]
    accelerator = (
        catalog.accelerators.get(spec.accelerator.name)
        if spec.accelerator and spec.accelerator.name in chosen["accelerator"]
        else None
    )
    plugins = [
        catalog.precision_plugins[p.name]
        for p in spec.precision_plugins
        if p.name in chosen["precision_plugins"]
    ]
    envs = [
        catalog.environments[e.name]
        for e in spec.cluster_environments
        if e.name in chosen["cluster_environments"]
    ]
    if not (strategies or accelerator or plugins or envs):
        return None
    path = f"{tests_dir}/{test_module_name(source)}"
    tables = test_tables.test_tables(
        catalog, strategies, accelerator, envs, plugins, selection.accelerators
    )
    text = template.render(
        header=header(source.path),
        package=package,
        source=source,
        tables=tables,
    )
    return RenderedFile(path, text, True)
