"""Describe the modules of a generated package: what each class derives from, imports,
declares and takes (``stratgen.pyapi`` turns the descriptions into source).

The runtime classes each spec value maps to come from the contract (``stratcore.contract``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from stratcore import contract
from stratcore.contract import (
    ACCELERATOR_ROOT,
    BASES,
    ENVIRONMENT_ROOT,
    ENVIRONMENT_VALUES,
    PLUMBING,
    PLUMBING_PARAMS,
    PRECISIONS,
    PRECISION_KINDS,
    PRECISION_ROOT,
    STRATEGY_ROOT,
    VALUE_TYPES,
    WRAPPERS,
)

from .catalog import (
    Accelerator,
    Catalog,
    ClusterEnvironment,
    PrecisionPlugin,
    Source,
    Strategy,
)
from .corefacts import class_defaults
from .model import Backend, Option, Requirement
from .pyapi import (
    Imports,
    Init,
    Param,
    PyClass,
    PyModule,
    annotated,
    class_doc,
    comment_text,
    literal,
    module_doc,
)

OPTION_ANNOTATIONS = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "path": "str | os.PathLike[str]",
    "mapping": "Mapping[str, Any]",
    "sequence": "Sequence[Any]",
    "any": "Any",
}


# --- strategies ----------------------------------------------------------------------------------


def strategy_module(strategy: Strategy) -> PyModule:
    imports = Imports(stdlib={"from __future__ import annotations"})
    bases = []
    if strategy.base == strategy.name and strategy.name != "strategy":
        module, mixin = BASES[strategy.base]
        imports.add_local(module, mixin)
        bases.append(mixin)
    parent = strategy.parent
    if strategy.wrapper != "none" and (parent is None or parent.wrapper != strategy.wrapper):
        wrapper_base = WRAPPERS[strategy.wrapper].base
        assert wrapper_base is not None  # only 'none' has no base
        module, mixin = wrapper_base
        imports.add_local(module, mixin)
        bases.append(mixin)
    if parent is None:
        imports.add_local(*STRATEGY_ROOT)
        bases.append(STRATEGY_ROOT[1])
    else:
        imports.add_local(f"strategies.{parent.module}", parent.class_name)
        bases.append(parent.class_name)

    attributes = _strategy_attributes(strategy, imports)
    init = _strategy_init(strategy, imports)
    doc = class_doc(
        strategy.description or f"The {strategy.name!r} strategy.",
        _registry_lines(strategy),
        _args_lines(strategy),
    )
    cls = PyClass(
        strategy.class_name, bases, doc, annotated(attributes, STRATEGY_ROOT, imports), init
    )
    return PyModule(
        path=f"strategies/{strategy.module}.py",
        source=strategy.source.path,
        doc=module_doc(
            strategy.class_name,
            strategy.description,
            f"the {strategy.name!r} strategy",
            _registry_phrase(strategy),
        ),
        imports=imports,
        classes=[cls],
        all_names=[strategy.class_name],
    )


def _changed(strategy: Strategy, key: str, value: Any) -> bool:
    """Whether the fact differs from the parent's, or for the root, from the runtime base's."""
    parent = strategy.parent
    if parent is None:
        return _runtime_facts(STRATEGY_ROOT).get(key, object()) != value
    return _strategy_facts(parent)[key] != value


def _runtime_facts(root: tuple[str, str]) -> dict[str, object]:
    """The values a runtime root class gives its facts (requirements as (module, install))."""
    facts = dict(class_defaults(*root))
    if "requirements" in facts:
        requirements: Any = facts["requirements"]
        facts["requirements"] = tuple((r.module, r.install) for r in requirements)
    return facts


def _strategy_facts(strategy: Strategy) -> dict[str, Any]:
    return {
        "strategy_name": None if strategy.abstract else strategy.name,
        "wrapper": strategy.wrapper,
        "launcher_name": strategy.launcher,
        "backend": strategy.backend.name if strategy.backend else None,
        "default_precision": strategy.default_precision,
        "supported_precisions": strategy.supported_precisions,
        "cluster_environments": strategy.cluster,
        "supported_accelerators": strategy.accelerators,
        "requirements": tuple((r.module, r.install) for r in strategy.requires),
        "hooks": strategy.hooks,
    }


def _strategy_attributes(strategy: Strategy, imports: Imports) -> list[tuple[str, str]]:
    facts = _strategy_facts(strategy)
    attributes = []
    for key, value in facts.items():
        if not _changed(strategy, key, value):
            continue
        if key == "backend":
            source = _backend_ref(strategy.backend, imports)
        elif key == "requirements":
            source = _requirements(strategy.requires, imports)
        elif key == "hooks":
            source = literal(_hooks_module(strategy))
        else:
            source = literal(value)
        attributes.append((key, source))
    return attributes


def _hooks_module(strategy: Strategy) -> str | None:
    """Hooks are a module path; a file next to the spec is copied into ``<package>.hooks``."""
    if strategy.hooks is None:
        return None
    if strategy.hooks.endswith(".py"):
        return ".hooks." + hooks_module_name(strategy.hooks)
    return strategy.hooks


def hooks_module_name(path: str) -> str:
    stem = path.rsplit("/", 1)[-1][: -len(".py")]
    return re.sub(r"\W", "_", stem, flags=re.ASCII)


def _backend_ref(backend: Backend | None, imports: Imports) -> str:
    if backend is None:
        return "None"
    constant = backend_constant(backend.name)
    imports.add_local("backends", constant)
    return constant


def backend_constant(name: str) -> str:
    return name.upper()


def _requirements(requires: Iterable[Requirement], imports: Imports) -> str:
    items = list(requires)
    if not items:
        return "()"
    imports.add_local(*VALUE_TYPES["Requirement"])
    calls = [f"Requirement({literal(r.module)}, {literal(r.install)})" for r in items]
    return "(" + ", ".join(calls) + ("," if len(calls) == 1 else "") + ")"


def option_annotation(option: Option, imports: Imports) -> str:
    if option.choices and set(option.types) <= {"str", "int"}:
        imports.stdlib.add("from typing import Literal")
        annotation = "Literal[" + ", ".join(literal(c) for c in option.choices) + "]"
    else:
        parts = []
        for t in option.types:
            parts.append(OPTION_ANNOTATIONS[t])
            if t == "path":
                imports.stdlib.add("import os")
            if t in ("mapping", "sequence"):
                imports.stdlib.add(
                    "from collections.abc import " + ("Mapping" if t == "mapping" else "Sequence")
                )
            if t in ("mapping", "sequence", "any"):
                imports.stdlib.add("from typing import Any")
        annotation = " | ".join(parts)
    if option.default is None and "any" not in option.types:
        annotation += " | None"
    return annotation


def _strategy_init(strategy: Strategy, imports: Imports) -> Init | None:
    parent = strategy.parent
    own = strategy.own_options
    redefaulted = [
        name
        for name, option in strategy.options.items()
        if parent is not None
        and name in parent.options
        and parent.options[name].default != option.default
    ]
    if not own and not redefaulted:
        return None
    positional = []
    for name in PLUMBING[strategy.base]:
        annotation, default, runtime_class = PLUMBING_PARAMS[name]
        positional.append(Param(name, annotation, default))
        if runtime_class is not None:
            imports.add_local(*runtime_class)
        if name in ("device", "parallel_devices"):
            imports.third_party.add("import torch")
    keyword_only = [
        Param(name, option_annotation(option, imports), literal(option.default))
        for name, option in strategy.options.items()
    ]
    super_args = [(p.name, p.name) for p in positional]
    super_args += [(name, name) for name in strategy.options if name not in own]
    assignments = [(name, name) for name in own]
    return Init(positional, keyword_only, super_args, assignments)


def _registry_phrase(strategy: Strategy) -> str:
    if strategy.abstract:
        return "a base for other strategies, not in the registry"
    names = [strategy.name, *strategy.aliases]
    label = "registry name" if len(names) == 1 else "registry names"
    return label + " " + ", ".join(f'"{n}"' for n in names)


def _registry_lines(strategy: Strategy) -> list[str]:
    if strategy.abstract:
        return []
    lines = [f'Registry name: ``"{strategy.name}"``.']
    if strategy.aliases:
        lines = ["Registry names:", "", f'- ``"{strategy.name}"``']
        for alias, preset in strategy.aliases.items():
            settings = ", ".join(f"{k}={literal(v)}" for k, v in preset.items())
            lines.append(f'- ``"{alias}"``: {settings}' if settings else f'- ``"{alias}"``')
    return lines


def _args_lines(strategy: Strategy) -> list[tuple[str, str]]:
    return [(name, option.doc) for name, option in strategy.options.items()]


# --- accelerators --------------------------------------------------------------------------------


def accelerator_module(accelerator: Accelerator) -> PyModule:
    spec = accelerator.spec
    imports = Imports(stdlib={"from __future__ import annotations"})
    imports.add_local(*ACCELERATOR_ROOT)
    supported = spec.precision.supported or PRECISIONS
    attributes = [
        ("accelerator_name", literal(spec.name)),
        ("device_type", literal(spec.device_type)),
        ("indexed", literal(spec.indexed)),
        ("backend", _backend_ref(accelerator.backend, imports)),
        ("default_precision", literal(spec.precision.default or "32-true")),
        ("supported_precisions", literal(tuple(supported))),
        ("needs_grad_scaler", literal(spec.grad_scaler)),
        ("auto_devices", literal(spec.auto_devices)),
        ("availability_probe", literal(spec.is_available)),
        ("device_count_probe", literal(spec.device_count)),
        ("visible_devices_env", literal(spec.visible_devices_env)),
        ("set_device_hook", literal(spec.set_device)),
        ("teardown_hook", literal(spec.teardown)),
        ("after_backward_hook", literal(spec.step_hooks.after_backward)),
        ("after_optimizer_step_hook", literal(spec.step_hooks.after_optimizer_step)),
        ("requirements", _requirements(spec.requires, imports)),
    ]
    # Attributes equal to the core's defaults only add noise.
    defaults = {
        "indexed": "True",
        "needs_grad_scaler": "False",
        "auto_devices": "None",
        "availability_probe": "None",
        "device_count_probe": "None",
        "visible_devices_env": "None",
        "set_device_hook": "None",
        "teardown_hook": "None",
        "after_backward_hook": "None",
        "after_optimizer_step_hook": "None",
        "requirements": "()",
    }
    attributes = [(k, v) for k, v in attributes if defaults.get(k) != v]
    doc = class_doc(
        spec.description or f"The {spec.name!r} accelerator.",
        [f'Accelerator name: ``"{spec.name}"``.'],
        [],
    )
    cls = PyClass(
        spec.class_name,
        [ACCELERATOR_ROOT[1]],
        doc,
        annotated(attributes, ACCELERATOR_ROOT, imports),
    )
    return PyModule(
        path=f"accelerators/{accelerator.module}.py",
        source=accelerator.source.path,
        doc=module_doc(
            spec.class_name,
            spec.description,
            f"the {spec.name!r} accelerator",
            f'accelerator name "{spec.name}"',
        ),
        imports=imports,
        classes=[cls],
        all_names=[spec.class_name],
    )


# --- precision plugins ---------------------------------------------------------------------------


def _precision_facts(plugin: PrecisionPlugin) -> dict[str, object]:
    """The class attributes that a precision plugin's spec decides."""
    return {
        "plugin_name": plugin.name,
        "modes": plugin.modes,
        "wrappers": plugin.wrappers,
        "accelerators": plugin.accelerators,
        "grad_scaler_class": plugin.grad_scaler,
        "requirements": plugin.requires,
    }


def precision_module(plugin: PrecisionPlugin) -> PyModule:
    imports = Imports(stdlib={"from __future__ import annotations"})
    bases = []
    parent = plugin.parent
    if plugin.kind != "precision" and (parent is None or parent.kind != plugin.kind):
        module, mixin = PRECISION_KINDS[plugin.kind]
        imports.add_local(module, mixin)
        bases.append(mixin)
    if parent is None:
        imports.add_local(*PRECISION_ROOT)
        bases.append(PRECISION_ROOT[1])
    else:
        imports.add_local(f"precision.{parent.module}", parent.class_name)
        bases.append(parent.class_name)
    facts = _precision_facts(plugin)
    # A fact that the parent class declares with the same value is inherited, not repeated.
    parent_facts = _precision_facts(parent) if parent else _runtime_facts(PRECISION_ROOT)
    attributes = []
    for key, value in facts.items():
        if key != "plugin_name" and parent_facts.get(key) == value:
            continue
        source = (
            _requirements(plugin.requires, imports) if key == "requirements" else literal(value)
        )
        attributes.append((key, source))
    extra = (
        []
        if plugin.abstract or not plugin.modes
        else ["Serves precision " + ", ".join(f'``"{m}"``' for m in plugin.modes) + "."]
    )
    doc = class_doc(plugin.description or f"The {plugin.name!r} precision plugin.", extra, [])
    cls = PyClass(plugin.class_name, bases, doc, annotated(attributes, PRECISION_ROOT, imports))
    return PyModule(
        path=f"precision/{plugin.module}.py",
        source=plugin.source.path,
        doc=module_doc(
            plugin.class_name,
            plugin.description,
            f"the {plugin.name!r} precision plugin",
            (
                "a base for other precision plugins"
                if plugin.abstract or not plugin.modes
                else "serves " + ", ".join(f'"{m}"' for m in plugin.modes)
            ),
        ),
        imports=imports,
        classes=[cls],
        all_names=[plugin.class_name],
    )


# --- cluster environments ------------------------------------------------------------------------


def environment_module(env: ClusterEnvironment) -> PyModule:
    imports = Imports(stdlib={"from __future__ import annotations"})
    parent = env.parent
    if parent is None:
        imports.add_local(*ENVIRONMENT_ROOT)
        bases = [ENVIRONMENT_ROOT[1]]
    else:
        imports.add_local(f"environments.{parent.module}", parent.class_name)
        bases = [parent.class_name]
    name = literal(None if env.abstract else env.name)
    attributes: list[tuple[str, str]] = [("environment_name", name)]
    parent_values = parent.values if parent else {}
    for key in (
        "detect",
        "creates_processes_externally",
        "settable",
        *ENVIRONMENT_VALUES,
        "requires",
    ):
        value = env.values.get(key)
        if value is None or parent_values.get(key) == value:
            continue
        if key in ("detect", "creates_processes_externally"):
            imports.add_local(*VALUE_TYPES["Condition"])
            attr = "detection" if key == "detect" else "external_processes"
            attributes.append((attr, _condition(value)))
        elif key == "settable":
            attributes.append(("settable", literal(value)))
        elif key == "requires":
            attributes.append(("requirements", _requirements(value, imports)))
        else:
            imports.add_local(*VALUE_TYPES["ValueSource"])
            attributes.append((f"{key}_source", _value_source(value)))
    if parent is None:  # the root restates nothing the runtime base already says
        attributes = [(k, v) for k, v in attributes if _runtime_default(k) != v]
        imports = Imports(stdlib={"from __future__ import annotations"})
        imports.add_local(*ENVIRONMENT_ROOT)
        for type_name in ("Condition", "ValueSource", "Requirement"):
            if any(v.startswith(f"{type_name}(") or f"({type_name}(" in v for _, v in attributes):
                imports.add_local(*VALUE_TYPES[type_name])
    doc = class_doc(env.description or f"The {env.name!r} cluster environment.", [], [])
    cls = PyClass(env.class_name, bases, doc, annotated(attributes, ENVIRONMENT_ROOT, imports))
    return PyModule(
        path=f"environments/{env.module}.py",
        source=env.source.path,
        doc=module_doc(
            env.class_name,
            env.description,
            f"the {env.name!r} cluster environment",
            (
                "a base for other cluster environments"
                if env.abstract
                else f'cluster environment "{env.name}"'
            ),
        ),
        imports=imports,
        classes=[cls],
        all_names=[env.class_name],
    )


def _runtime_default(attribute: str) -> str | None:
    """The source of the runtime environment base's value for ``attribute``, as emitted."""
    defaults = class_defaults(*ENVIRONMENT_ROOT)
    if attribute not in defaults:
        return None
    value = defaults[attribute]
    if isinstance(value, contract.Condition):
        return _condition(value)
    if isinstance(value, contract.ValueSource):
        return _value_source(value)
    if isinstance(value, tuple) and not value:
        return "()"
    return literal(value)


def _condition(condition: contract.Condition) -> str:
    args = []
    if condition.always:
        args.append("always=True")
    if condition.all_set:
        args.append(f"all_set={literal(condition.all_set)}")
    if condition.any_set:
        args.append(f"any_set={literal(condition.any_set)}")
    if condition.not_equal:
        args.append(f"not_equal={literal(condition.not_equal)}")
    return f"Condition({', '.join(args)})"


def _value_source(source: contract.ValueSource) -> str:
    args = []
    if source.env:
        args.append(f"env={literal(source.env)}")
    if source.parse is not None:
        args.append(f"parse={literal(source.parse)}")
    if source.default is not None:
        args.append(f"default={literal(source.default)}")
    if source.fallback is not None:
        args.append(f"fallback={literal(source.fallback)}")
    return f"ValueSource({', '.join(args)})"


# --- package-level modules -------------------------------------------------------------------


def backends_module(catalog: Catalog, names: Iterable[str], source: str) -> PyModule:
    imports = Imports(stdlib={"from __future__ import annotations"})
    imports.add_local(*VALUE_TYPES["CollectiveBackend"])
    body = []
    all_names = []
    for name in names:
        backend = catalog.backends[name]
        args = [f"name={literal(backend.name)}"]
        args.append(f"reduce_ops=frozenset({literal(tuple(backend.reduce_ops))})")
        if backend.casts:
            args.append(f"casts={literal(backend.casts)}")
        if backend.init_hook:
            args.append(f"init_hook={literal(backend.init_hook)}")
        if backend.requires:
            args.append(f"requirements={_requirements(backend.requires, imports)}")
        constant = backend_constant(name)
        comment = "".join(f"#: {comment_text(line)}\n" for line in backend.description.split("\n"))
        body.append(f"{comment}{constant} = CollectiveBackend({', '.join(args)})")
        all_names.append(constant)
    return PyModule(
        path="backends.py",
        source=source,
        doc="Collective backends and what each can reduce natively.",
        imports=imports,
        classes=[],
        body=body,
        all_names=all_names,
    )


def describe_sources(sources: Iterable[Source]) -> str:
    paths = sorted({s.path for s in sources})
    return ", ".join(paths) if len(paths) <= 3 else f"{len(paths)} spec files under specs/"
