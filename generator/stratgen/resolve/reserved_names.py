"""Names a spec may not use, because generated code uses them for something else.

- Class names: the names generated modules import (derived from the contract's tables of
  runtime classes, ``stratcore.contract``, and the few standard-library names the emitters
  import; the Lightning target checks its own modules, see
  ``stratgen.targets.lightning.plugins``), the names the registry module defines, and Python's
  builtins.
- Option names: besides the core's own (``resolve.checks.reserved_option_names``), the names a
  generated constructor uses itself (``self``, ``*args``, ``**kwargs``, ``super()``).
- Module names made from a file name (a hooks file, a spec file for the Lightning target): a
  Python identifier that is not a keyword (``module_name_problem``).
- Package names: the standard library's top-level modules and the packages generated code
  imports (``RESERVED_PACKAGE_NAMES``): a package of that name, on the path, would be imported
  in their place.

tests/generator/resolve/test_reserved_names.py compares these with what the checked-in
generated modules import, define and use, so that they cannot go stale.
"""

from __future__ import annotations

import builtins
import keyword
import sys

from stratcore import contract

#: Names generated modules import from ``typing``, ``collections.abc`` and ``types``.
STDLIB_NAMES = frozenset({"Any", "ClassVar", "Literal", "Mapping", "ModuleType", "Sequence"})


def _runtime_names() -> frozenset[str]:
    refs: list[tuple[str, str]] = [
        contract.STRATEGY_ROOT,
        contract.PRECISION_ROOT,
        contract.ENVIRONMENT_ROOT,
        contract.ACCELERATOR_ROOT,
        contract.DEEPSPEED_ACCELERATOR_ROOT,
        contract.LAUNCHER_ROOT,
        *contract.BASES.values(),
        *(w.base for w in contract.WRAPPERS.values() if w.base is not None),
        *contract.LAUNCHERS.values(),
        *contract.PRECISION_KINDS.values(),
        *contract.VALUE_TYPES.values(),
    ]
    names = {name for _, name in refs}
    for _, exported in (
        *contract.PACKAGE_EXPORTS,
        *contract.REGISTRY_IMPORTS,
        *contract.RAY_IMPORTS,
    ):
        names |= set(exported)
    return frozenset(n for n in names if n[:1].isupper())


#: Python's builtins: a generated name that takes one shadows it for code that means it.
BUILTIN_NAMES = frozenset(dir(builtins))
#: What the registry module defines besides the names it imports
#: (``templates/package/registry.py.j2``).
REGISTRY_MODULE_NAMES = frozenset({"REGISTRY", "get_strategy", "list_strategies"})
#: What a generated constructor uses itself (``templates/package/module.py.j2``):
#: ``def __init__(self, *args, <options>, **kwargs)`` calling ``super().__init__``.
CONSTRUCTOR_NAMES = frozenset({"self", "args", "kwargs", "super"})

#: Names that generated modules import from the runtime or the standard library: a generated
#: class of the same name would shadow them.
IMPORTED_CLASS_NAMES = _runtime_names() | STDLIB_NAMES
#: Every name a generated class may not take.
RESERVED_CLASS_NAMES = IMPORTED_CLASS_NAMES | REGISTRY_MODULE_NAMES | BUILTIN_NAMES

#: Top-level packages generated code imports (the runtime, torch, the Lightning target's
#: Lightning) and stratgen itself.
IMPORTED_PACKAGES = frozenset(
    {contract.__name__.partition(".")[0], "torch", "lightning", "stratgen"}
)
#: Names a generated package may not take: on the path, it would be imported in their place.
RESERVED_PACKAGE_NAMES = frozenset(sys.stdlib_module_names) | IMPORTED_PACKAGES


def class_name_problem(name: str) -> str | None:
    """Why a generated class may not be called ``name``, or None."""
    if name in IMPORTED_CLASS_NAMES:
        return "generated modules import a core or typing name of that name"
    if name in REGISTRY_MODULE_NAMES:
        return "the registry module defines that name"
    if name in BUILTIN_NAMES:
        return f"it would shadow Python's builtin {name}"
    return None


def module_name_problem(name: str) -> str | None:
    """Why a file name cannot become the module ``name`` (imported by name), or None."""
    if not name.isidentifier():
        return "a module name is a Python identifier (letters, digits and '_', not first a digit)"
    if keyword.iskeyword(name):
        return f"{name!r} is a Python keyword, which cannot be imported by name"
    if name.startswith("__"):
        return f"{name!r} is a name Python gives a module's own files"
    return None
