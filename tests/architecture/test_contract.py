"""The contract (stratcore.contract) and the runtime agree: every name in a vocabulary has an
implementation in the runtime, and every implementation in the runtime has a name."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest
import stratcore
from stratcore import contract
from stratcore.contract import RuntimeClass


def resolve(ref: RuntimeClass) -> type | None:
    """The class a contract entry names, or None when its module or class is missing."""
    module, name = ref
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if inspect.isclass(found) else None


def unimplemented(table: dict[str, RuntimeClass]) -> list[str]:
    """Entries of a contract table whose runtime class does not exist."""
    return [f"{key}: {ref[0]}.{ref[1]}" for key, ref in table.items() if resolve(ref) is None]


def runtime_modules() -> list[ModuleType]:
    """Every module of the runtime but entry points (``__main__``) and the Lightning
    adapters, which have a contract of their own (``stratcore.lightning.contract``)."""
    modules = []
    for info in pkgutil.walk_packages(stratcore.__path__, "stratcore."):
        if info.name.endswith(".__main__") or info.name.startswith("stratcore.lightning"):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def runtime_subclasses(base: type) -> set[type]:
    """Public classes the runtime defines that derive from ``base`` (``base`` included)."""
    found = set()
    for module in runtime_modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and issubclass(value, base)
                and not name.startswith("_")
            ):
                found.add(value)
    return found


def unnamed(classes: Iterable[type], refs: Iterable[RuntimeClass]) -> list[str]:
    """Runtime classes that no contract entry names (an entry may name a class by the module
    that defines it or by a package that exports it)."""
    named = {id(found) for found in map(resolve, refs) if found is not None}
    return sorted(f"{c.__module__}.{c.__name__}" for c in classes if id(c) not in named)


def wrapper_refs() -> dict[str, RuntimeClass]:
    return {name: w.base for name, w in contract.WRAPPERS.items() if w.base is not None}


# --- the helpers can fail --------------------------------------------------------------------


def test_a_name_without_implementation_is_reported() -> None:
    table = {
        "ddp": ("stratcore.wrappers.ddp", "DDPStrategyBase"),
        "nope": ("stratcore.ddp", "NoSuch"),
    }
    assert unimplemented(table) == ["nope: stratcore.ddp.NoSuch"]
    table = {"gone": ("stratcore.wrappers.ddp", "NoSuchMixin")}
    assert unimplemented(table) == ["gone: stratcore.wrappers.ddp.NoSuchMixin"]


def test_an_implementation_without_name_is_reported() -> None:
    from stratcore.wrappers.ddp import DDP2StrategyBase, DDPStrategyBase

    refs = [("stratcore.wrappers.ddp", "DDPStrategyBase")]
    assert unnamed([DDPStrategyBase, DDP2StrategyBase], refs) == [
        "stratcore.wrappers.ddp.DDP2StrategyBase"
    ]


# --- the contract is torch-free ------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    ["stratcore.contract", "stratcore.wording", "stratcore.file_modes", "stratcore.version"],
)
def test_what_the_generator_imports_of_the_runtime_does_not_import_torch(module: str) -> None:
    runtime = str(Path(stratcore.__file__).parent.parent)
    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": runtime}
    result = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    assert result.returncode == 0, f"importing {module} imported torch"


# --- names -> implementations --------------------------------------------------------------------


def test_every_base_and_root_exists() -> None:
    roots = {
        "strategy root": contract.STRATEGY_ROOT,
        "precision root": contract.PRECISION_ROOT,
        "environment root": contract.ENVIRONMENT_ROOT,
        "accelerator root": contract.ACCELERATOR_ROOT,
        "launcher root": contract.LAUNCHER_ROOT,
    }
    assert unimplemented({**roots, **contract.BASES}) == []


def test_every_wrapper_has_its_runtime_base() -> None:
    from stratcore.strategy import StrategyBase

    assert unimplemented(wrapper_refs()) == []
    topology = {resolve(ref) for ref in contract.BASES.values()}
    for name, ref in wrapper_refs().items():
        cls = resolve(ref)
        assert cls is not None and issubclass(cls, StrategyBase)
        owner = next(k for k in cls.__mro__ if "wrapper" in vars(k))
        if owner not in topology:  # a wrapper base that declares its name must declare this one
            assert cls.wrapper == name, f"{cls.__name__}.wrapper is {cls.wrapper!r}, not {name!r}"
        assert contract.WRAPPERS[name].bases <= set(contract.BASES)


@pytest.mark.parametrize("name", [n for n, w in contract.WRAPPERS.items() if w.options])
def test_every_wrapper_option_is_read_by_its_runtime_base(name: str) -> None:
    cls = resolve(wrapper_refs()[name])
    assert cls is not None
    source = "".join(inspect.getsource(k) for k in cls.__mro__ if k.__module__ == cls.__module__)
    missing = [option for option in contract.WRAPPERS[name].options if option not in source]
    assert not missing, f"{cls.__name__} does not read {missing}"


@pytest.mark.parametrize("name", list(contract.LAUNCHERS))
def test_every_launcher_has_its_runtime_class(name: str) -> None:
    from stratcore.launchers import Launcher

    cls = resolve(contract.LAUNCHERS[name])
    assert cls is not None, f"no runtime class for launcher {name!r}"
    assert issubclass(cls, Launcher)
    if "name" in vars(cls):
        assert vars(cls)["name"] == name


def test_every_precision_kind_has_its_runtime_class() -> None:
    from stratcore.precision.base import PrecisionBase

    assert unimplemented(contract.PRECISION_KINDS) == []
    for ref in contract.PRECISION_KINDS.values():
        cls = resolve(ref)
        assert cls is not None and issubclass(cls, PrecisionBase)


def test_plain_vocabularies_match_the_runtime() -> None:
    import torch
    from stratcore import accelerator, collectives, environment
    from stratcore.precision import base as precision

    # The runtime imports the contract's vocabularies rather than restating them.
    assert accelerator.PRECISIONS is contract.PRECISIONS
    assert precision.PRECISIONS is contract.PRECISIONS
    assert precision.PRECISION_ALIASES is contract.PRECISION_ALIASES
    assert collectives.REDUCE_OPS is contract.REDUCE_OPS
    assert accelerator.Accelerator.default_precision == contract.DEFAULT_PRECISION
    assert all(isinstance(getattr(torch, name, None), torch.dtype) for name in contract.DTYPES)
    assert set(environment.PARSERS) == set(contract.VALUE_PARSERS)
    base = environment.ClusterEnvironmentBase()
    for fallback in contract.VALUE_FALLBACKS:
        base._fallback(fallback)  # noqa: SLF001 - raises for a fallback it does not know
    assert set(contract.OPTION_PYTYPES) == set(contract.OPTION_TYPES)


def test_the_shared_value_types_are_the_runtimes() -> None:
    from stratcore import environment, imports

    assert environment.Condition is contract.Condition
    assert environment.ValueSource is contract.ValueSource
    assert imports.Requirement is contract.Requirement
    assert unimplemented(contract.VALUE_TYPES) == []


@pytest.mark.parametrize("base", list(contract.CONSTRUCTOR_ARGUMENTS))
def test_plumbing_is_what_the_runtime_bases_take(base: str) -> None:
    cls = resolve(contract.BASES[base])
    assert cls is not None
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert tuple(p.name for p in parameters) == contract.CONSTRUCTOR_ARGUMENTS[base]


def test_package_exports_exist() -> None:
    for module, names in (*contract.PACKAGE_EXPORTS, *contract.REGISTRY_IMPORTS):
        loaded = importlib.import_module(module)
        assert [n for n in names if not hasattr(loaded, n)] == []


# --- implementations -> names --------------------------------------------------------------------


def test_every_runtime_launcher_is_named() -> None:
    from stratcore.launchers import Launcher

    classes = runtime_subclasses(Launcher) - {Launcher}
    assert unnamed(classes, contract.LAUNCHERS.values()) == []


def shared_bases(refs: Iterable[RuntimeClass]) -> set[type]:
    """Runtime classes that named classes derive from (the bases they share)."""
    named = [cls for cls in map(resolve, refs) if cls is not None]
    return {base for cls in named for base in cls.__mro__[1:]}


def test_every_runtime_strategy_base_is_named() -> None:
    """Every strategy base of the runtime is a base or wrapper a spec can name, or shared by
    bases that are (``OneProcessStrategyBase``, under DataParallel's and the IPUs')."""
    from stratcore.strategy import StrategyBase

    refs = [*contract.BASES.values(), *wrapper_refs().values()]
    classes = runtime_subclasses(StrategyBase)
    assert unnamed(classes - shared_bases(refs), refs) == []
    assert unnamed(classes & shared_bases(refs), refs) == [
        "stratcore.parallel.OneProcessStrategyBase"
    ]


def test_every_runtime_precision_base_is_named() -> None:
    """Every precision base is a kind a spec can name, or shared by kinds that are
    (``CastPrecisionBase``, under the double and half kinds)."""
    from stratcore.precision.base import PrecisionBase

    refs = list(contract.PRECISION_KINDS.values())
    classes = runtime_subclasses(PrecisionBase)
    assert unnamed(classes - shared_bases(refs), refs) == []
    assert unnamed(classes & shared_bases(refs), refs) == [
        "stratcore.precision.base.CastPrecisionBase"
    ]


def test_precision_scoring_prefers_the_wrapper_then_the_accelerator() -> None:
    class Plugin:
        def __init__(self, wrappers: tuple[str, ...], accelerators: tuple[str, ...]) -> None:
            self.modes = ("16-mixed",)
            self.wrappers = wrappers
            self.accelerators = accelerators

    general, on_cuda, for_fsdp = Plugin((), ()), Plugin((), ("cuda",)), Plugin(("fsdp",), ())
    plugins = [general, on_cuda, for_fsdp]
    assert contract.best_plugin(plugins, "16-mixed", "fsdp", "cuda") is for_fsdp
    assert contract.best_plugin(plugins, "16-mixed", "ddp", "cuda") is on_cuda
    assert contract.best_plugin(plugins, "16-mixed", "ddp", "cpu") is general
    assert contract.best_plugin(plugins, "64-true", "ddp", "cpu") is None
