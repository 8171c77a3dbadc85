"""Describe the strategy modules of a generated package: what each class derives from, imports,
declares and takes (``component_modules`` describes the other modules; ``stratgen.codegen.python_source``
turns the descriptions into source).

The runtime classes each spec value maps to come from the contract (``stratcore.contract``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from stratcore.contract import (
    BASES,
    LAUNCHERS,
    LAUNCHER_ROOT,
    STRATEGY_ROOT,
    VALUE_TYPES,
    WRAPPERS,
)

from ...codegen.python_source import (
    Imports,
    Init,
    Param,
    PyClass,
    PyModule,
    annotated,
    class_doc,
    literal,
    module_doc,
)
from ...resolve.catalog import Strategy
from ...resolve.runtime_facts import Reference, class_defaults
from ...spec.model import Backend, Option, Requirement

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
    taken_from = parent.class_name if parent is not None else BASES[strategy.base][1]
    arguments = (
        f"Arguments other than its options below are those of ``{taken_from}``."
        if init is not None
        else f"Its arguments are those of ``{taken_from}``."
    )
    registry_lines = _registry_lines(strategy)
    doc = class_doc(
        strategy.description or f"The {strategy.name!r} strategy.",
        [*registry_lines, *([""] if registry_lines else []), arguments],
        [(p.name, strategy.options[p.name].doc) for p in init.keyword_only] if init else [],
    )
    cls = PyClass(
        strategy.class_name,
        bases,
        doc,
        annotated(attributes, STRATEGY_ROOT, imports, REFERENCE_ANNOTATIONS),
        init,
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
        return runtime_facts(STRATEGY_ROOT).get(key, object()) != value
    return _strategy_facts(parent)[key] != value


def runtime_facts(root: tuple[str, str]) -> dict[str, object]:
    """The values a runtime root class gives its facts (requires as (module, install) pairs)."""
    facts = dict(class_defaults(*root))
    launcher = facts.pop("launcher_class", None)
    if isinstance(launcher, Reference):  # the launcher class, named by the contract
        by_class = {ref: name for name, ref in LAUNCHERS.items()}
        facts["launcher_class"] = by_class.get((launcher.module, launcher.name))
    if "requires" in facts:
        requires: Any = facts["requires"]
        facts["requires"] = tuple((r.module, r.install) for r in requires)
    return facts


def _strategy_facts(strategy: Strategy) -> dict[str, Any]:
    return {
        "name": None if strategy.abstract else strategy.name,
        "wrapper": strategy.wrapper,
        "launcher_class": strategy.launcher,
        "backend": strategy.backend.name if strategy.backend else None,
        "default_precision": strategy.default_precision,
        "supported_precisions": strategy.supported_precisions,
        "cluster": strategy.cluster,
        "accelerators": strategy.accelerators,
        "requires": tuple((r.module, r.install) for r in strategy.requires),
        "hooks": strategy.hooks,
    }


def _strategy_attributes(strategy: Strategy, imports: Imports) -> list[tuple[str, str]]:
    facts = _strategy_facts(strategy)
    attributes = []
    for key, value in facts.items():
        if not _changed(strategy, key, value):
            continue
        if key == "wrapper" and value != "none":
            continue  # the wrapper's runtime base, among the class's bases, declares it
        if key == "backend":
            source = backend_ref(strategy.backend, imports)
        elif key == "requires":
            source = requirements_source(strategy.requires, imports)
        elif key == "launcher_class":
            module, launcher_class = LAUNCHERS[value]
            imports.add_local(module, launcher_class)
            source = launcher_class
        elif key == "hooks":
            source = _hooks_reference(strategy.hooks, imports)
        else:
            source = literal(value)
        attributes.append((key, source))
    return attributes


#: Strategy attributes that hold references, with the annotation the runtime base declares.
REFERENCE_ANNOTATIONS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "launcher_class": ("ClassVar[type[Launcher]]", (("typing", "ClassVar"), LAUNCHER_ROOT)),
    "hooks": ("ClassVar[ModuleType | None]", (("typing", "ClassVar"), ("types", "ModuleType"))),
}


def _hooks_reference(hooks: str | None, imports: Imports) -> str:
    """The hooks module, imported: a file next to the spec is copied into ``<package>.hooks``
    and imported under a name no other import of the module can take
    (``from ..hooks import ipu as ipu_hooks``); a module path is imported as it is
    (``import pkg.hooks``)."""
    if hooks is None:
        return "None"
    if hooks.endswith(".py"):
        name = hooks_module_name(hooks)
        imports.add_local("hooks", f"{name} as {name}_hooks")
        return f"{name}_hooks"
    imports.third_party.add(f"import {hooks}")
    return hooks


def hooks_module_name(path: str) -> str:
    stem = path.rsplit("/", 1)[-1][: -len(".py")]
    return re.sub(r"\W", "_", stem, flags=re.ASCII)


def backend_ref(backend: Backend | None, imports: Imports) -> str:
    if backend is None:
        return "None"
    constant = backend_constant(backend.name)
    imports.add_local("backends", constant)
    return constant


def backend_constant(name: str) -> str:
    return name.upper()


def requirements_source(requires: Iterable[Requirement], imports: Imports) -> str:
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
    """The constructor of a class that declares options of its own, or gives an inherited one
    another default: those as keyword arguments, everything else passed on to its base."""
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
    imports.stdlib.add("from typing import Any")
    keyword_only = [
        Param(name, option_annotation(option, imports), literal(option.default))
        for name, option in strategy.options.items()
        if name in own or name in redefaulted
    ]
    return Init(keyword_only, [(name, name) for name in redefaulted], [(n, n) for n in own])


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
            # Shown as Python's repr shows a value (prose, not code: no need for black's quotes).
            settings = ", ".join(
                f"{k}={v!r}" if isinstance(v, str) else f"{k}={literal(v)}"
                for k, v in preset.items()
            )
            lines.append(f'- ``"{alias}"``: {settings}' if settings else f'- ``"{alias}"``')
    return lines
