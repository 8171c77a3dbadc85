"""What the generated Lightning tests assert: plugins registered under their names, cases that
can run here (or a skip naming why not), and training that ends where one process ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stratcore import testing

from .runner import LR, registries, run_training, training_case

FABRIC_DOUBLE_TOLERANCE = 1e-7


def assert_registered(
    framework: str,
    accelerators: Sequence[type],
    strategies: Sequence[tuple[str, type, dict[str, Any]]],
) -> None:
    """Every accelerator is in ``framework``'s registry under its spec's name, and every
    (registry name, class, preset) resolves to that class with that preset."""
    accelerator_registry, strategy_registry = registries(framework)
    for cls in accelerators:
        name = cls.spec.name  # type: ignore[attr-defined]
        assert name in accelerator_registry, f"accelerator {name!r} is not registered"
        assert accelerator_registry[name]["accelerator"] is cls, f"{name!r} is another class"
    for name, cls, preset in strategies:
        assert name in strategy_registry, f"strategy {name!r} is not registered"
        entry = strategy_registry[name]
        assert entry["strategy"] is cls, f"{name!r} is {entry['strategy']!r}, not {cls!r}"
        assert entry["init_params"] == preset, f"{name!r} presets {entry['init_params']}"


def assert_trains_like_one_process(
    framework: str, module: str, plugin: type, folder: Path, devices: int = 2, steps: int = 3
) -> None:
    """Train with ``plugin`` (by its registry name) on ``devices`` processes; every rank ends
    with the parameters of one process training on the whole batch, within the precision's
    tolerance."""
    case = training_case(framework, module, plugin, folder, devices, steps)
    assert_reports_like_one_process(case, run_training(case))


def assert_reports_like_one_process(case: dict[str, Any], reports: list[dict[str, Any]]) -> None:
    """Every rank of a training scenario ended with the parameters of one process training on
    the whole batch, within the precision's tolerance."""
    precision, steps, devices = case["precision"], case["steps"], case["devices"]
    dtype = testing.reference_dtype(precision)
    expected = testing.reference_parameters(steps, LR, dtype)
    tolerance = testing.precision_tolerance(precision)
    if case["framework"] == "fabric" and precision == "64-true":
        # Fabric's double precision casts the module's output back to float32
        # (DoublePrecision.convert_output), so the loss and its gradient carry float32
        # rounding; the parameters' dtype shows that training ran in float64.
        tolerance = FABRIC_DOUBLE_TOLERANCE
    for report in reports:
        assert report["world_size"] == devices, f"{report['world_size']} processes trained"
        assert report["precision"] == precision
        assert report["dtype"] == str(dtype), f"parameters in {report['dtype']}, not {dtype}"
        testing.assert_parameters_close(report["parameters"], expected, atol=tolerance)
