"""Translate resolved specs into descriptions of Python modules and classes.

Everything that decides what the generated code says lives here: class bases, imports,
class attributes, constructor signatures and docstrings. Values from specs reach the code
only as literals made by ``literal`` (Python's own ``repr``), as names the model has already
validated as identifiers, or as docstring text escaped by ``docstring_body``; nothing from a
spec is ever evaluated or rendered as a template.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .catalog import (
    PLUMBING,
    Accelerator,
    Catalog,
    ClusterEnvironment,
    PrecisionPlugin,
    Source,
    Strategy,
)
from .corefacts import class_annotations
from .model import (
    ENVIRONMENT_VALUES,
    PRECISIONS,
    Backend,
    Condition,
    Option,
    Requirement,
    ValueSource,
)

#: The runtime package every generated package imports.
RUNTIME_PACKAGE = "stratcore"

# Runtime classes each spec value maps to: (module, class name).
STRATEGY_ROOT = ("stratcore.strategy", "StrategyBase")
TOPOLOGY_MIXINS = {
    "single_device": ("stratcore.single_device", "SingleDeviceStrategyBase"),
    "parallel": ("stratcore.parallel", "ParallelStrategyBase"),
}
WRAPPER_MIXINS = {
    "dp": ("stratcore.wrappers.dp", "DataParallelStrategyBase"),
    "ddp": ("stratcore.wrappers.ddp", "DDPStrategyBase"),
    "ddp2": ("stratcore.wrappers.ddp", "DDP2StrategyBase"),
    "fsdp": ("stratcore.wrappers.fsdp", "FSDPStrategyBase"),
    "model_parallel": ("stratcore.wrappers.model_parallel", "ModelParallelStrategyBase"),
    "fairscale_sharded": ("stratcore.wrappers.sharded", "ShardedStrategyBase"),
    "fairscale_fsdp": ("stratcore.wrappers.fairscale_fsdp", "FairscaleFSDPStrategyBase"),
    "deepspeed": ("stratcore.wrappers.deepspeed", "DeepSpeedStrategyBase"),
    "horovod": ("stratcore.wrappers.horovod", "HorovodStrategyBase"),
    "bagua": ("stratcore.wrappers.bagua", "BaguaStrategyBase"),
    "xla": ("stratcore.wrappers.xla", "XLAStrategyBase"),
    "xla_fsdp": ("stratcore.wrappers.xla", "XLAFSDPStrategyBase"),
}
#: Launcher name (in specs) -> the runtime class that launches so.
LAUNCHER_CLASSES = {
    "none": ("stratcore.launchers", "InlineLauncher"),
    "external": ("stratcore.launchers", "ExternalLauncher"),
    "popen": ("stratcore.launchers", "PopenLauncher"),
    "spawn": ("stratcore.launchers", "SpawnLauncher"),
    "fork": ("stratcore.launchers", "ForkLauncher"),
    "forkserver": ("stratcore.launchers", "ForkServerLauncher"),
    "xla": ("stratcore.wrappers.xla", "XLALauncher"),
    "horovodrun": ("stratcore.wrappers.horovod", "HorovodRunLauncher"),
}
PRECISION_ROOT = ("stratcore.precision", "PrecisionBase")
PRECISION_MIXINS = {
    "double": ("stratcore.precision", "DoublePrecisionBase"),
    "mixed": ("stratcore.precision", "MixedPrecisionBase"),
    "half": ("stratcore.precision", "HalfPrecisionBase"),
    "apex": ("stratcore.precision", "ApexPrecisionBase"),
    "fsdp_mixed": ("stratcore.wrappers.fsdp", "FSDPPrecisionBase"),
    "deepspeed": ("stratcore.wrappers.deepspeed", "DeepSpeedPrecisionBase"),
    "xla": ("stratcore.wrappers.xla", "XLAPrecisionBase"),
    "ipu": ("stratcore.ipu", "IPUPrecisionBase"),
    "transformer_engine": ("stratcore.transformer_engine", "TransformerEnginePrecisionBase"),
}
ENVIRONMENT_ROOT = ("stratcore.environment", "ClusterEnvironmentBase")
ACCELERATOR_ROOT = ("stratcore.accelerator", "Accelerator")

# Constructor arguments that every strategy of a base kind takes, passed on to the core.
PLUMBING_PARAMS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "accelerator": (("accelerator", "Accelerator | None", "None"),),
    "device": (("device", "torch.device | str | int | None", "None"),),
    "parallel_devices": (("parallel_devices", "list[torch.device] | None", "None"),),
    "cluster_environment": (("cluster_environment", "ClusterEnvironmentBase | None", "None"),),
    "checkpoint_io": (("checkpoint_io", "CheckpointIO | None", "None"),),
    "precision_plugin": (("precision_plugin", "PrecisionBase | None", "None"),),
    "num_nodes": (("num_nodes", "int", "1"),),
}
PLUMBING_IMPORTS = {
    "accelerator": ("stratcore.accelerator", "Accelerator"),
    "cluster_environment": ("stratcore.environment", "ClusterEnvironmentBase"),
    "checkpoint_io": ("stratcore.checkpoint_io", "CheckpointIO"),
    "precision_plugin": ("stratcore.precision", "PrecisionBase"),
}

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


# --- literals and docstrings -----------------------------------------------------------------


def literal(value: Any) -> str:
    """Python source for a plain value from a spec."""
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, tuple | list):
        items = [literal(v) for v in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as a literal")


_DOC_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\r": "\\r"}


def docstring_body(text: str, indent: str) -> str:
    """Escape ``text`` so that it sits verbatim inside a triple-quoted docstring, through black.

    Backslashes, control characters and white space other than plain spaces are escaped. So
    are quotes that could end the docstring or that black would pad (one followed by another,
    one at the start or the end of the text), and the spaces that black strips or re-indents:
    leading spaces of the first line, trailing spaces of every line, and the first leading
    space of continuation lines when every one of them is indented. Continuation lines are
    indented by ``indent``, which ``inspect.cleandoc`` removes again; a text whose
    continuation lines are all empty is written on one line, its line breaks as escapes.
    """
    raw_lines = text.split("\n")
    rest = [line for line in raw_lines[1:] if line.strip(" ")]
    indented = bool(rest) and all(line.startswith(" ") for line in rest)
    lines = []
    for number, raw in enumerate(raw_lines):
        last_line = number == len(raw_lines) - 1
        chars = [_escape_doc_char(char) for char in raw]
        for index, char in enumerate(raw):
            if char != '"':
                continue
            if last_line and index == len(raw) - 1:
                chars[index] = "\\x22"  # black pads a docstring that ends in a quote
            elif (number == 0 and index == 0) or raw[index + 1 : index + 2] == '"':
                chars[index] = '\\"'
        content = raw.lstrip(" ")
        lead = len(raw) - len(content)
        if lead and (number == 0 or not content):
            chars[:lead] = ["\\x20"] * lead
        elif lead and indented:
            chars[0] = "\\x20"
        trail = len(raw) - len(raw.rstrip(" "))
        if trail:
            chars[len(raw) - trail :] = ["\\x20"] * trail
        lines.append("".join(chars))
    if not any(lines[1:]):
        # black drops the lines of a docstring whose continuation lines are all blank; as
        # escapes, the line breaks survive.
        return "\\n".join(lines)
    body = lines[0]
    for line in lines[1:]:
        body += "\n" + (indent + line if line else "")
    return body


def _escape_doc_char(char: str) -> str:
    if char in _DOC_ESCAPES:
        return _DOC_ESCAPES[char]
    code = ord(char)
    if (
        code < 0x20
        or code == 0x7F
        or 0x80 <= code < 0xA0
        or char in "\ufeff"
        or (char.isspace() and char not in " \n")
    ):
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def comment_text(text: str) -> str:
    """``text`` made safe for one ``#`` comment line: line breaks and controls escaped."""
    return "".join(_escape_doc_char(c) if c != "\\" else c for c in text.replace("\t", " "))


DOC_WIDTH = 96


def wrap_exactly(text: str, first_width: int, width: int) -> list[str]:
    """Wrap a one-line text at single spaces so that joining the lines with a space gives the
    text back exactly (runs of spaces, leading and trailing ones included)."""
    pieces = text.split(" ")
    lines: list[str] = []
    current = pieces[0]
    for piece in pieces[1:]:
        limit = width if lines else first_width
        if current and piece and len(current) + 1 + len(piece) > limit:
            lines.append(current)
            current = piece
        else:
            current = f"{current} {piece}"
    lines.append(current)
    return lines


# --- module descriptions ------------------------------------------------------------------------


@dataclass
class Imports:
    """Import statements of one module, grouped and sorted like isort would."""

    stdlib: set[str] = field(default_factory=set)
    third_party: set[str] = field(default_factory=set)
    local: dict[str, set[str]] = field(default_factory=dict)

    def add_local(self, module: str, name: str) -> None:
        """Import ``name`` from ``module``: a module of the runtime (``stratcore.*``), imported
        absolutely, or one of the generated package, given from its root ('backends')."""
        if module.partition(".")[0] == RUNTIME_PACKAGE:
            self.third_party.add(f"from {module} import {name}")
        else:
            self.local.setdefault(module, set()).add(name)

    def lines(self, module_path: str) -> list[list[str]]:
        """Import blocks for the module at ``module_path`` (e.g. 'strategies/ddp.py')."""
        future = "from __future__ import annotations"
        blocks = [[future]] if future in self.stdlib else []
        stdlib = _merged(self.stdlib - {future})
        if stdlib:
            blocks.append(stdlib)
        if self.third_party:
            blocks.append(_merged(self.third_party))
        local = []
        for module in sorted(self.local, key=lambda m: relative_module(module_path, m)):
            names = ", ".join(sorted(self.local[module]))
            local.append(f"from {relative_module(module_path, module)} import {names}")
        if local:
            blocks.append(local)
        return blocks


def relative_module(module_path: str, target: str) -> str:
    """The relative import of ``target`` ('core.strategy') from the file at ``module_path``."""
    here = module_path.split("/")[:-1]
    there = target.split(".")
    common = 0
    while common < len(here) and common < len(there) - 1 and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def _import_sort_key(line: str) -> tuple[int, str, str]:
    # The whole line breaks ties between imports from one module: sets iterate in hash order.
    return (0 if line.startswith("import ") else 1, line.split()[1], line)


def _merged(lines: Iterable[str]) -> list[str]:
    """Import statements with one ``from`` line per module, sorted as isort sorts them."""
    plain = set()
    names: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("from "):
            module, _, imported = line[len("from ") :].partition(" import ")
            names.setdefault(module, set()).update(n.strip() for n in imported.split(","))
        else:
            plain.add(line)
    merged = [f"from {m} import {', '.join(sorted(n))}" for m, n in names.items()]
    return sorted(plain | set(merged), key=_import_sort_key)


@dataclass
class Param:
    name: str
    annotation: str
    default: str


@dataclass
class Init:
    positional: list[Param]
    keyword_only: list[Param]
    super_args: list[tuple[str, str]]
    assignments: list[tuple[str, str]]


@dataclass
class PyClass:
    name: str
    bases: list[str]
    doc: str
    attributes: list[tuple[str, str, str]]  # (name, annotation, value)
    init: Init | None = None


@dataclass
class PyModule:
    """One generated Python file."""

    path: str  # relative to the package root, e.g. 'strategies/ddp.py'
    source: str  # what it was generated from, for the header
    doc: str
    imports: Imports
    classes: list[PyClass]
    body: list[str] = field(default_factory=list)  # module-level assignments
    all_names: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return self.path.count("/")


def annotated(
    attributes: list[tuple[str, str]], root: tuple[str, str], imports: Imports
) -> list[tuple[str, str, str]]:
    """Give each class attribute the type its core base class declares for it.

    Without the annotation, a type checker would take the value itself as the attribute's type
    in the generated class, and reject a subclass that sets another value."""
    declared = class_annotations(*root)
    result = []
    for name, value in attributes:
        annotation, needs = declared[name]
        for module, imported in needs:
            if module in ("typing", "types"):
                imports.stdlib.add(f"from {module} import {imported}")
            else:
                imports.add_local(module, imported)
        result.append((name, annotation, value))
    return result


# --- strategies ----------------------------------------------------------------------------------


def strategy_module(strategy: Strategy) -> PyModule:
    imports = Imports(stdlib={"from __future__ import annotations"})
    bases = []
    if strategy.base == strategy.name and strategy.name != "strategy":
        _, mixin = TOPOLOGY_MIXINS[strategy.base]
        imports.add_local(TOPOLOGY_MIXINS[strategy.base][0], mixin)
        bases.append(mixin)
    parent = strategy.parent
    if strategy.wrapper != "none" and (parent is None or parent.wrapper != strategy.wrapper):
        module, mixin = WRAPPER_MIXINS[strategy.wrapper]
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
    doc = _class_doc(
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
        doc=f"The ``{strategy.class_name}`` strategy.",
        imports=imports,
        classes=[cls],
        all_names=[strategy.class_name],
    )


def _changed(strategy: Strategy, key: str, value: Any) -> bool:
    parent = strategy.parent
    return parent is None or _strategy_facts(parent)[key] != value


def _strategy_facts(strategy: Strategy) -> dict[str, Any]:
    return {
        "strategy_name": None if strategy.abstract else strategy.name,
        "launcher": strategy.launcher,
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
            source = _hooks_ref(strategy, imports)
        elif key == "launcher":
            module, name = LAUNCHER_CLASSES[value]
            imports.add_local(module, name)
            source = name
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


def _hooks_ref(strategy: Strategy, imports: Imports) -> str:
    """The hooks module, imported: ``from ..hooks import ipu``, or ``import pkg.hooks``."""
    module = _hooks_module(strategy)
    if module is None:
        return "None"
    if module.startswith("."):
        package, _, name = module[1:].rpartition(".")
        imports.add_local(package, name)
        return name
    imports.third_party.add(f"import {module}")
    return module


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
    imports.add_local("stratcore.imports", "Requirement")
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
        (param,) = PLUMBING_PARAMS[name]
        positional.append(Param(*param))
        if name in PLUMBING_IMPORTS:
            imports.add_local(*PLUMBING_IMPORTS[name])
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


def _class_doc(description: str, extra: list[str], args: list[tuple[str, str]]) -> str:
    """A docstring: the spec's description verbatim, then generated sections."""
    parts = [docstring_body(description, "    ")]
    if extra:
        parts.append("\n".join("    " + docstring_body(line, "") if line else "" for line in extra))
    if args:
        arg_lines = ["    Args:"]
        for name, text in args:
            arg_lines.append(f"        {name}: " + option_doc(name, text))
        parts.append("\n".join(arg_lines))
    return "\n\n".join(parts)


ARG_INDENT = " " * 12


def option_doc(name: str, text: str) -> str:
    """An option's text in the Args section, as docstring source.

    A one-line text is wrapped at single spaces; a text with line breaks keeps its own. Either
    way only line breaks and the indentation of continuation lines are added, so the text can
    be read back exactly.
    """
    if not text:
        return "Documented in the spec."
    if "\n" in text:
        return docstring_body(text, ARG_INDENT)
    lines = wrap_exactly(text, DOC_WIDTH - 8 - len(name) - 2, DOC_WIDTH - len(ARG_INDENT))
    return docstring_body("\n".join(lines), ARG_INDENT)


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
    doc = _class_doc(
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
        doc=f"The ``{spec.class_name}``.",
        imports=imports,
        classes=[cls],
        all_names=[spec.class_name],
    )


# --- precision plugins ---------------------------------------------------------------------------


#: What the root precision plugin class declares.
_PRECISION_ROOT_FACTS: dict[str, object] = {
    "modes": (),
    "wrappers": (),
    "accelerators": (),
    "grad_scaler_class": None,
    "requirements": (),
}


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
        module, mixin = PRECISION_MIXINS[plugin.kind]
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
    parent_facts = _precision_facts(parent) if parent else _PRECISION_ROOT_FACTS
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
    doc = _class_doc(plugin.description or f"The {plugin.name!r} precision plugin.", extra, [])
    cls = PyClass(plugin.class_name, bases, doc, annotated(attributes, PRECISION_ROOT, imports))
    return PyModule(
        path=f"precision/{plugin.module}.py",
        source=plugin.source.path,
        doc=f"The ``{plugin.class_name}``.",
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
    attributes: list[tuple[str, str]] = [
        ("environment_name", literal(None if env.abstract else env.name))
    ]
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
            imports.add_local("stratcore.environment", "Condition")
            attr = "detection" if key == "detect" else "external_processes"
            attributes.append((attr, _condition(value)))
        elif key == "settable":
            attributes.append(("settable", literal(value)))
        elif key == "requires":
            attributes.append(("requirements", _requirements(value, imports)))
        else:
            imports.add_local("stratcore.environment", "ValueSource")
            attributes.append((f"{key}_source", _value_source(value)))
    doc = _class_doc(env.description or f"The {env.name!r} cluster environment.", [], [])
    cls = PyClass(env.class_name, bases, doc, annotated(attributes, ENVIRONMENT_ROOT, imports))
    return PyModule(
        path=f"environments/{env.module}.py",
        source=env.source.path,
        doc=f"The ``{env.class_name}``.",
        imports=imports,
        classes=[cls],
        all_names=[env.class_name],
    )


def _condition(condition: Condition) -> str:
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


def _value_source(source: ValueSource) -> str:
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
    imports.add_local("stratcore.collectives", "CollectiveBackend")
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


# --- facts the generated tests check -----------------------------------------------------------


@dataclass
class StrategyTestFacts:
    """What a strategy's spec says it does, as literals for its generated tests."""

    strategy: Strategy
    #: (registry name, the options a strategy built under that name holds, as a literal)
    registry: list[tuple[str, str]]
    #: (accelerator name, a ``testing.Expectation(...)`` literal) for each accelerator it runs on
    expectations: list[tuple[str, str]]
    run_devices: int  # processes per node in the real-run tests
    parallel: bool

    @property
    def name(self) -> str:
        return self.strategy.name

    @property
    def class_name(self) -> str:
        return self.strategy.class_name


def _expectation(catalog: Catalog, strategy: Strategy, accelerator_name: str, devices: int) -> str:
    """What the spec says ``strategy`` does on one accelerator, as a constructor call."""
    accelerator = catalog.accelerators[accelerator_name]
    on_device = accelerator.spec.precision.supported or PRECISIONS
    precisions = tuple(
        mode
        for mode in strategy.supported_precisions
        if mode in on_device and catalog.select_precision(strategy, accelerator_name, mode)
    )
    default = strategy.default_precision or accelerator.spec.precision.default or "32-true"
    backend = strategy.backend or accelerator.backend
    hooks = accelerator.spec.step_hooks
    step_hooks = {
        point: path
        for point, path in (
            ("after_backward", hooks.after_backward),
            ("after_optimizer_step", hooks.after_optimizer_step),
        )
        if path is not None
    }
    arguments = [
        f"devices={devices}",
        f"default_precision={literal(default)}",
        f"precisions={literal(precisions)}",
        f"backend={literal(backend.name)}",
        f"reduce_ops={literal(tuple(backend.reduce_ops))}",
    ]
    if backend.casts:
        arguments.append(f"casts={literal(dict(backend.casts))}")
    if step_hooks:
        arguments.append(f"step_hooks={literal(step_hooks)}")
    return f"testing.Expectation({', '.join(arguments)})"


def strategy_test_facts(
    catalog: Catalog, strategy: Strategy, accelerators: Iterable[str]
) -> StrategyTestFacts:
    defaults = {name: option.default for name, option in strategy.options.items()}
    names: list[tuple[str, dict[str, Any]]] = [] if strategy.abstract else [(strategy.name, {})]
    names += list(strategy.aliases.items())
    registry = [(name, literal({**defaults, **preset})) for name, preset in names]
    single_process = (
        strategy.base != "parallel"
        or strategy.wrapper in ("dp", "ddp2")
        or strategy.launcher == "none"
    )
    devices = 1 if single_process else 2
    chosen = set(accelerators)
    expectations = [
        (name, _expectation(catalog, strategy, name, devices))
        for name in strategy.accelerators
        if name in chosen
    ]
    return StrategyTestFacts(
        strategy=strategy,
        registry=registry,
        expectations=expectations,
        run_devices=devices,
        parallel=strategy.base == "parallel",
    )


@dataclass
class EnvironmentTestCase:
    """A consistent set of variables under which an environment must be detected, and the
    values it must then read (literals for its generated test)."""

    name: str
    class_name: str
    abstract: bool
    environ: str
    files: str
    expected: str
    external: bool
    negatives: list[tuple[str, str | None]]


# Example values for each reading, and the inputs special parsers turn into them.
_EXAMPLES: dict[str, tuple[str, Any]] = {
    "world_size": ("4", 4),
    "global_rank": ("3", 3),
    "local_rank": ("1", 1),
    "node_rank": ("1", 1),
    "main_address": ("10.1.2.3", "10.1.2.3"),
    "main_port": ("29400", 29400),
}
_PARSER_EXAMPLES: dict[str, tuple[str, str, Any]] = {
    # parser: (variable it is meant for, input, expected reading)
    "slurm_first_host": ("SLURM_NODELIST", "node[07-09],gpu1", "node07"),
    "slurm_job_port": ("SLURM_JOB_ID", "1234567", 19567),
    "lsf_first_host": ("LSB_DJOB_RANKFILE", "<rankfile>", "<hostname>"),
    "lsf_node_rank": ("LSB_DJOB_RANKFILE", "<rankfile>", 0),
    "lsf_job_port": ("LSB_JOBID", "98765", 23765),
}
#: Parsers that derive a port from their scheduler's job id only; any other variable they
#: read holds the port itself.
_JOB_PORT_PARSERS = ("slurm_job_port", "lsf_job_port")
RANKFILE = "launchhost\n<hostname>\n<hostname>\notherhost\notherhost\n"


def environment_test_case(env: ClusterEnvironment) -> EnvironmentTestCase:
    values = env.values
    environ: dict[str, str] = {}
    files: dict[str, str] = {}
    expected: dict[str, Any] = {}
    for key, (raw, reading) in _EXAMPLES.items():
        source: ValueSource | None = values.get(key)
        if source is None:
            continue
        parser_example = _PARSER_EXAMPLES.get(source.parse) if source.parse else None
        if parser_example is not None and (
            parser_example[0] in source.env or source.parse not in _JOB_PORT_PARSERS
        ):
            variable, raw, reading = parser_example
            if variable not in source.env:
                variable = source.env[0]
        elif source.env:
            variable = source.env[0]
        elif source.default is not None:
            expected[key] = source.default
            continue
        else:
            continue
        if raw == "<rankfile>":
            files[variable] = RANKFILE
        elif variable in environ:
            # Two readings from one variable (Kubeflow's RANK is rank and node rank).
            reading = int(environ[variable]) if isinstance(reading, int) else environ[variable]
        else:
            environ[variable] = raw
        expected[key] = reading
    detect: Condition = values["detect"] or Condition()
    negatives: list[tuple[str, str | None]] = []
    for variable in detect.all_set:
        if variable not in environ and variable not in files:
            environ[variable] = "1"
        negatives.append((variable, None))
    if detect.any_set and not any(v in environ or v in files for v in detect.any_set):
        environ[detect.any_set[0]] = "4"
    for variable, refused in detect.not_equal.items():
        environ.setdefault(variable, "training-job")
        negatives.extend((variable, value) for value in refused)
    external = values["creates_processes_externally"] or Condition(always=True)
    return EnvironmentTestCase(
        name=env.name,
        class_name=env.class_name,
        abstract=env.abstract,
        environ=literal(environ),
        files=literal(files),
        expected=literal(expected),
        external=_holds(external, environ),
        negatives=[] if detect.always else negatives,
    )


def _holds(condition: Condition, environ: dict[str, str]) -> bool:
    if condition.always:
        return True
    if not (condition.all_set or condition.any_set):
        return False
    if not all(v in environ for v in condition.all_set):
        return False
    if condition.any_set and not any(v in environ for v in condition.any_set):
        return False
    return all(environ.get(v) not in values for v, values in condition.not_equal.items())
