"""Describe the modules of the components a strategy composes: accelerators, precision
plugins, cluster environments and the collective backends (``strategy_modules`` describes the
strategies; ``stratgen.codegen.python_source`` turns descriptions into source)."""

from __future__ import annotations

from collections.abc import Iterable

from stratcore import contract
from stratcore.contract import (
    ACCELERATOR_ROOT,
    DEFAULT_PRECISION,
    ENVIRONMENT_ROOT,
    ENVIRONMENT_VALUES,
    LAYOUT_VALUES,
    PRECISIONS,
    PRECISION_KINDS,
    PRECISION_ROOT,
    VALUE_TYPES,
)

from ...codegen.python_source import (
    Imports,
    PyClass,
    PyModule,
    annotated,
    class_doc,
    comment_text,
    docstring,
    literal,
    module_doc,
)
from ...resolve.catalog import Accelerator, Catalog, ClusterEnvironment, PrecisionPlugin
from ...resolve.deepspeed_accelerators import deepspeed_generated
from ...resolve.runtime_facts import class_defaults
from .strategy_modules import backend_constant, backend_ref, requirements_source, runtime_facts

# --- accelerators --------------------------------------------------------------------------------


def accelerator_module(accelerator: Accelerator) -> PyModule:
    spec = accelerator.spec
    imports = Imports(stdlib={"from __future__ import annotations"})
    imports.add_local(*ACCELERATOR_ROOT)
    values: list[tuple[str, object]] = [
        ("name", spec.name),
        ("device_type", spec.device_type),
        ("current_device_hook", spec.current_device),
        ("indexed", spec.indexed),
        ("backend", accelerator.backend),
        ("ray_resource", spec.ray_resource),
        ("default_precision", spec.precision.default or DEFAULT_PRECISION),
        ("supported_precisions", tuple(spec.precision.supported or PRECISIONS)),
        ("precision_probes", dict(spec.precision.probes or {})),
        ("grad_scaler", spec.grad_scaler),
        ("auto_devices", spec.auto_devices),
        ("is_available_hook", spec.is_available),
        ("build_marker", spec.build_marker),
        ("device_count_hook", spec.device_count),
        ("visible_devices_env", spec.visible_devices_env),
        ("set_device_hook", spec.set_device),
        ("teardown_hook", spec.teardown),
        ("after_backward_hook", spec.step_hooks.after_backward),
        ("after_optimizer_step_hook", spec.step_hooks.after_optimizer_step),
        ("install", spec.install),
        ("deepspeed_accelerator", spec.deepspeed_accelerator),
        ("deepspeed_generated", deepspeed_generated(spec)),
        ("sync_batchnorm", spec.sync_batchnorm),
    ]
    # What equals the runtime's default only adds noise (so does a device type of None: the
    # runtime then finds it through current_device_hook); the backend is always the package's
    # own (it carries the spec's capabilities).
    runtime = {**class_defaults(*ACCELERATOR_ROOT), "device_type": None}
    attributes = [
        (key, backend_ref(accelerator.backend, imports) if key == "backend" else literal(value))
        for key, value in values
        if key == "backend" or runtime.get(key, object()) != value
    ]
    if spec.requires:
        attributes.append(("requires", requirements_source(spec.requires, imports)))
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
        "name": plugin.name,
        "modes": plugin.modes,
        "wrappers": plugin.wrappers,
        "accelerators": plugin.accelerators,
        "grad_scaler": plugin.grad_scaler,
        "requires": plugin.requires,
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
    parent_facts = _precision_facts(parent) if parent else runtime_facts(PRECISION_ROOT)
    attributes = []
    for key, value in facts.items():
        if key != "name" and parent_facts.get(key) == value:
            continue
        source = (
            requirements_source(plugin.requires, imports) if key == "requires" else literal(value)
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
    attributes: list[tuple[str, str]] = [("name", name)]
    parent_values = parent.values if parent else {}
    for key in (
        "detect",
        "creates_processes_externally",
        "settable",
        *ENVIRONMENT_VALUES,
        *LAYOUT_VALUES,
        "runs_inside",
        "requires",
    ):
        value = env.values.get(key)
        if value is None or parent_values.get(key) == value:
            continue
        if key in ("detect", "creates_processes_externally"):
            imports.add_local(*VALUE_TYPES["Condition"])
            attr = f"{key}_condition"
            attributes.append((attr, _condition(value)))
        elif key in ("settable", "runs_inside"):
            attributes.append((key, literal(value)))
        elif key == "requires":
            attributes.append(("requires", requirements_source(value, imports)))
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
    if condition.none_set:
        args.append(f"none_set={literal(condition.none_set)}")
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
            args.append(f"requires={requirements_source(backend.requires, imports)}")
        if backend.torch_name:
            args.append(f"torch_name={literal(backend.torch_name)}")
        if backend.registered_by:
            args.append(f"registered_by={literal(backend.registered_by)}")
        if backend.from_device_map:
            args.append("from_device_map=True")
        if backend.splits_groups:
            args.append("splits_groups=True")
        constant = backend_constant(name)
        comment = "".join(f"#: {comment_text(line)}\n" for line in backend.description.split("\n"))
        body.append(f"{comment}{constant} = CollectiveBackend({', '.join(args)})")
        all_names.append(constant)
    return PyModule(
        path="backends.py",
        source=source,
        doc=docstring(["Collective backends and what each can reduce natively."]),
        imports=imports,
        classes=[],
        body=body,
        all_names=all_names,
    )
