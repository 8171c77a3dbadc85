"""The deepspeed target: DeepSpeed accelerators from the same specs.

Every accelerator of the specs whose devices are not CPU processes (DeepSpeed's own CPU
accelerator serves those) becomes a subclass of ``stratcore``'s
``DeepSpeedAcceleratorBase`` in ``<package>.deepspeed``, one module per spec file; the class
only names the stratlib accelerator that holds the facts (``spec``). The runtime base
implements DeepSpeed's accelerator interface from them.

Which DeepSpeed accelerator a device's DeepSpeed strategies train on is the accelerator spec's
to say: DeepSpeed's own class (``deepspeed_accelerator``, by default the device type) where
DeepSpeed has one, else the generated one (``deepspeed_generated``, resolved with the
specs: ``stratgen.resolve.deepspeed_accelerators``). Without
this target, the runtime makes the same class from the accelerator's facts when a strategy needs
it; the target gives it a module and a name to import.
"""

from __future__ import annotations

from collections.abc import Iterable

from stratcore.contract import DEEPSPEED_ACCELERATOR_ROOT, deepspeed_accelerator_name

from ...codegen.python_source import (
    DocSource,
    Imports,
    PyClass,
    PyModule,
    docstring,
    first_sentence,
)
from ...codegen.templating import RenderedFile, Renderer, describe_sources, header
from ...resolve.catalog import Accelerator, Catalog
from ...resolve.deepspeed_accelerators import deepspeed_generated
from ...resolve.selection import Selection

#: The target's subpackage of a generated package.
SUBPACKAGE = "deepspeed"


def rendered(accelerator: Accelerator) -> bool:
    """Whether the target renders a DeepSpeed accelerator for ``accelerator``."""
    return accelerator.spec.device_type != "cpu"


def class_name(accelerator: Accelerator) -> str:
    """``MUSAAccelerator`` -> ``MUSADeepSpeedAccelerator``."""
    return deepspeed_accelerator_name(accelerator.class_name)


def _doc(accelerator: Accelerator) -> DocSource:
    spec = accelerator.spec
    summary = first_sentence(spec.description) or f"The {spec.name!r} accelerator"
    if deepspeed_generated(spec):
        use = "The device's DeepSpeed strategies train on it."
    else:
        own = spec.deepspeed_accelerator or spec.device_type
        use = (
            f"The device's DeepSpeed strategies train on DeepSpeed's own {own!r} accelerator "
            f"(DS_ACCELERATOR={own}); this one is for code that drives DeepSpeed itself."
        )
    paragraphs = [
        f"{summary}, for DeepSpeed.",
        "DeepSpeed's accelerator interface on the facts of "
        f"{accelerator.source.path} (``spec``), through ``stratcore``. "
        f"``{class_name(accelerator)}.install()`` before ``import deepspeed`` makes DeepSpeed "
        f"use it. {use}",
    ]
    return docstring(paragraphs, "    ", 92, 92)


def accelerator_module(accelerator: Accelerator) -> PyModule:
    """``deepspeed/<module>.py``: the DeepSpeed accelerator of one accelerator spec."""
    imports = Imports(stdlib={"from __future__ import annotations"})
    imports.add_local(*DEEPSPEED_ACCELERATOR_ROOT)
    imports.add_local("", "accelerators")
    name = class_name(accelerator)
    source = accelerator.source.path
    return PyModule(
        path=f"{SUBPACKAGE}/{accelerator.module}.py",
        source=f"{source} (deepspeed target)",
        doc=docstring([f"{name}: {source} for DeepSpeed."]),
        imports=imports,
        classes=[
            PyClass(
                name,
                [DEEPSPEED_ACCELERATOR_ROOT[1]],
                _doc(accelerator),
                [("spec", "", f"accelerators.{accelerator.class_name}")],
            )
        ],
        all_names=[name],
    )


def package_init(accelerators: list[Accelerator], sources: str) -> PyModule:
    """``deepspeed/__init__.py``: every generated DeepSpeed accelerator, by name."""
    imports = Imports()
    for accelerator in accelerators:
        imports.add_local(f"{SUBPACKAGE}.{accelerator.module}", class_name(accelerator))
    doc = (
        f"DeepSpeed accelerators generated from {sources}: DeepSpeed's accelerator interface "
        "for each device. Importing this package imports nothing of DeepSpeed; "
        "``<Name>.install()`` before ``import deepspeed`` makes DeepSpeed use one."
    )
    return PyModule(
        path=f"{SUBPACKAGE}/__init__.py",
        source=f"{sources} (deepspeed target)",
        doc=docstring([doc]),
        imports=imports,
        classes=[],
        all_names=sorted(class_name(a) for a in accelerators),
    )


def modules(catalog: Catalog, accelerator_names: Iterable[str], sources: str) -> list[PyModule]:
    """Every module of the deepspeed target."""
    chosen = [catalog.accelerators[n] for n in accelerator_names]
    chosen = [a for a in chosen if rendered(a)]
    return [package_init(chosen, sources), *(accelerator_module(a) for a in chosen)]


def render_accelerators(
    catalog: Catalog, selection: Selection, renderer: Renderer, package_dir: str
) -> list[RenderedFile]:
    """The deepspeed target: a DeepSpeed accelerator for each device of the package."""
    module_template = renderer.template("package/module.py.j2")
    sources = describe_sources(catalog.sources)
    return [
        RenderedFile(
            f"{package_dir}/{module.path}",
            module_template.render(header=header(module.source), module=module),
            True,
        )
        for module in modules(catalog, selection.accelerators, sources)
    ]
