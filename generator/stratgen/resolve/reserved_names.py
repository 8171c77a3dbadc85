"""Class names a spec may not give a generated class: the names generated modules import.

Derived from the contract's tables of runtime classes (``stratcore.contract``) and the few
standard-library names the emitters import (the Lightning target checks its own modules, see
``stratgen.targets.lightning.plugins``), so that it cannot go stale;
tests/generator/resolve/test_reserved_names.py compares it with what the checked-in generated
modules import.
"""

from __future__ import annotations

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


#: Names that generated modules import from the runtime or the standard library: a generated
#: class of the same name would shadow them.
RESERVED_CLASS_NAMES = _runtime_names() | STDLIB_NAMES
