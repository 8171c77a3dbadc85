"""stratcore.lightning.contract against the installed Lightning: every class it names exists
where it says, and the names it says Lightning registers are the ones Lightning registers."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

pytest.importorskip("lightning", reason="the Lightning target needs lightning>=2.6,<2.7")

from stratcore.lightning import contract  # noqa: E402


def _module(framework: str, part: str) -> object:
    return importlib.import_module(f"{contract.FRAMEWORKS[framework]}.{part}")


@pytest.mark.parametrize("framework", sorted(contract.FRAMEWORKS))
def test_strategy_bases_are_lightning_strategies(framework: str) -> None:
    strategies = _module(framework, "strategies")
    root = strategies.Strategy  # type: ignore[attr-defined]
    for pair, classes in contract.STRATEGY_BASES.items():
        if framework in classes:
            cls = getattr(strategies, classes[framework])
            assert issubclass(cls, root), f"{pair}: {cls} is not a Lightning strategy"


def _lightnings_own(registry: dict[str, dict[str, Any]], key: str) -> set[str]:
    """The names in a Lightning registry that Lightning registered (plugins imported by other
    tests in this process register theirs in the same registry)."""
    return {
        name for name, entry in registry.items() if entry[key].__module__.startswith("lightning.")
    }


@pytest.mark.parametrize("framework", sorted(contract.FRAMEWORKS))
def test_strategy_names_are_the_ones_lightning_registers(framework: str) -> None:
    registry = getattr(_module(framework, "strategies"), contract.REGISTRIES[framework][1])
    assert _lightnings_own(registry, "strategy") == contract.STRATEGY_NAMES[framework]


@pytest.mark.parametrize("framework", sorted(contract.FRAMEWORKS))
def test_accelerator_names_are_lightnings_and_its_gpu_alias(framework: str) -> None:
    registry = getattr(_module(framework, "accelerators"), contract.REGISTRIES[framework][0])
    registered = _lightnings_own(registry, "accelerator")
    # 'gpu' is not registered: both connectors read it as 'cuda' (or 'mps') themselves.
    assert registered | {"gpu"} == contract.ACCELERATOR_NAMES


@pytest.mark.parametrize("framework", sorted(contract.FRAMEWORKS))
def test_accelerator_bases_are_lightning_accelerators(framework: str) -> None:
    accelerators = _module(framework, "accelerators")
    root = accelerators.Accelerator  # type: ignore[attr-defined]
    for device_type in (*contract.ACCELERATOR_BASES, "hpu"):
        cls = getattr(accelerators, contract.accelerator_base(device_type))
        assert issubclass(cls, root), device_type


def test_environments_are_lightnings_cluster_environments() -> None:
    environments = importlib.import_module(contract.ENVIRONMENTS_MODULE)
    root = environments.ClusterEnvironment
    for name, class_name in contract.ENVIRONMENTS.items():
        assert issubclass(getattr(environments, class_name), root), name


def test_launcher_presets_are_arguments_of_lightnings_ddp_strategies() -> None:
    for framework in contract.FRAMEWORKS:
        ddp = _module(framework, "strategies").DDPStrategy  # type: ignore[attr-defined]
        parameters = inspect.signature(ddp.__init__).parameters
        for launcher, preset in contract.LAUNCHER_PRESETS.items():
            assert set(preset) <= set(parameters), (framework, launcher)


@pytest.mark.parametrize("framework", sorted(contract.FRAMEWORKS))
def test_device_limits_name_lightning_strategies_that_check_the_device(framework: str) -> None:
    strategies = _module(framework, "strategies")
    for class_name, (accepted, why) in contract.DEVICE_LIMITS.items():
        cls = getattr(strategies, class_name)
        source = inspect.getsource(inspect.getmodule(cls))  # type: ignore[arg-type]
        if accepted is not None:  # Lightning tests for its own accelerator class
            assert "isinstance(self.accelerator, CUDAAccelerator)" in source, class_name
        assert why.startswith(f"Lightning's {class_name} ")


def test_adapters_and_register_are_importable() -> None:
    for kind, (module, name) in contract.ADAPTERS.items():
        assert inspect.isclass(getattr(importlib.import_module(module), name)), kind
    module, name = contract.REGISTER
    assert callable(getattr(importlib.import_module(module), name))


def test_imported_names_cover_every_class_a_plugin_module_imports() -> None:
    names = contract.imported_names()
    assert {"DDPStrategy", "FSDPStrategy", "SLURMEnvironment", "StrategyAdapter"} <= names
    assert {"AcceleratorRegistry", "STRATEGY_REGISTRY", "Accelerator"} <= names
