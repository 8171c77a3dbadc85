"""Runs the Lightning plugins' training cases in fresh processes, as users' scripts run.

A case (``training_case``) names a plugin by its registry name, the framework (Trainer or
Fabric), the devices and the precision. ``run_cases`` runs several in one job as
``python -m stratcore.testing.lightning.program cases CASES_JSON`` (under
``STRATLIB_RANK_PREFIX``, if set, as a launcher starts a rank), one after the other: Lightning's
launcher starts the other ranks by running the same command again, as it does for users'
scripts, or spawns them. Every rank writes ``rank<N>.json`` into the case's folder; the
assertions (``assertions``) compare them with one process training on the whole batch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from stratcore import testing
from stratcore.launchers.base import rank_command
from stratcore.lightning.contract import DEVICE_LIMITS
from stratcore.registry import registry_of

from .. import watch

#: The learning rate of every case's SGD optimizer.
LR = 0.1
#: The module every process of a case runs (``python -m``).
PROGRAM = "stratcore.testing.lightning.program"


def registries(framework: str) -> tuple[Any, Any]:
    """(accelerator registry, strategy registry) of ``framework``."""
    if framework == "pytorch":
        from lightning.pytorch.accelerators import AcceleratorRegistry
        from lightning.pytorch.strategies import StrategyRegistry

        return AcceleratorRegistry, StrategyRegistry
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
    from lightning.fabric.strategies import STRATEGY_REGISTRY

    return ACCELERATOR_REGISTRY, STRATEGY_REGISTRY


def runnable_or_skip(plugin: type, devices: int = 1) -> str:
    """The accelerator a strategy plugin trains on ``devices`` processes on here, or skip the
    calling test with the reason it cannot (a missing package, no such device on this machine,
    too few of them, a device the plugin refuses: ``stratcore.lightning.strategies.refusal_on``)."""
    import pytest

    accelerator = testing.runnable_or_skip(plugin.spec, devices)  # type: ignore[attr-defined]
    reason = device_limit(plugin, accelerator)
    if reason is None:  # the device is here: what the plugin would refuse on it
        import torch
        from stratcore.lightning.strategies import refusal_on

        registry = registry_of(plugin.spec)  # type: ignore[attr-defined]
        reason = refusal_on(plugin, torch.device(registry.accelerators[accelerator].device_type))
    if reason is not None:
        pytest.skip(reason)
    return accelerator


def device_limit(plugin: type, accelerator: str) -> str | None:
    """Why the Lightning strategy ``plugin`` derives from refuses ``accelerator`` (see
    ``contract.DEVICE_LIMITS``), or None if it accepts it."""
    device_type = registry_of(plugin.spec).accelerators[accelerator].device_type  # type: ignore[attr-defined]
    for base in plugin.__mro__:
        if not base.__module__.startswith("lightning.") or base.__name__ not in DEVICE_LIMITS:
            continue
        accepted, why = DEVICE_LIMITS[base.__name__]
        refused = device_type == "cpu" if accepted is None else accelerator not in accepted
        if refused:
            return f"{why}; accelerator {accelerator!r} drives {device_type!r} devices here"
    return None


def scenario_precision(plugin: type, accelerator: str) -> str:
    """The precision the training scenario uses: the spec's default (Lightning's Trainer and
    Fabric choose 32-true when told nothing, so the scenario names it)."""
    spec = plugin.spec  # type: ignore[attr-defined]
    registry = registry_of(spec)
    default = spec.default_precision or registry.accelerators[accelerator].default_precision
    return str(default)


def training_case(
    framework: str, module: str, plugin: type, folder: Path, devices: int = 2, steps: int = 3
) -> dict[str, Any]:
    """The training scenario of ``plugin`` (by its registry name) on ``devices`` processes, as
    ``main`` runs it: it writes every rank's report into ``folder``. Skips the calling test
    where the plugin cannot train here (``runnable_or_skip``)."""
    accelerator = runnable_or_skip(plugin, devices)
    return {
        "framework": framework,
        "module": module,
        "strategy": plugin.strategy_name,  # type: ignore[attr-defined]
        "accelerator": accelerator,
        "devices": devices,
        "precision": scenario_precision(plugin, accelerator),
        "steps": steps,
        "folder": str(folder),
        "script": devices > 1 and launches_by_script(plugin),
    }


def launches_by_script(plugin: type) -> bool:
    """Whether Lightning starts the other ranks of ``plugin`` by running the script again
    (its subprocess launcher), as for DDP's default 'popen' start method, FSDP, DeepSpeed and
    ModelParallel; not where it spawns them (a 'spawn' or 'fork' start method the registry
    name presets, XLA)."""
    if any(base.__name__ == "XLAStrategy" for base in plugin.__mro__):
        return False
    preset = registered_preset(plugin)
    return preset.get("start_method", "popen") == "popen"


def registered_preset(plugin: type) -> dict[str, Any]:
    """The options ``plugin``'s own registry name presets in its framework."""
    module = plugin.__module__
    framework = "pytorch" if module.split(".")[-2:-1] == ["pytorch"] else "fabric"
    strategies = registries(framework)[1]
    name = plugin.strategy_name  # type: ignore[attr-defined]
    return dict(strategies[name]["init_params"]) if name in strategies else {}


def run_training(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one training scenario (``training_case``) in a job of its own; returns every rank's
    report, in rank order. It fails only when its processes stop making progress
    (``stratcore.testing.watch``), not on a time limit."""
    done = run_cases([case])
    what = f"{case['framework']} training with {case['strategy']!r}"
    assert (
        done.returncode == 0
    ), f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    reports = read_reports(case)
    assert reports is not None, f"{what}: a rank wrote no report:\n{done.stderr[-4000:]}"
    return reports


def run_cases(cases: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """Run training scenarios (``training_case``) one after the other in one job: the
    single-process and spawning ones first, in this process, then those whose ranks Lightning
    starts by running the script again, which the process it starts runs with this one. Each
    writes its reports into its folder; the job fails at the first that fails."""
    order = sorted(cases, key=lambda case: bool(case["script"]))
    # The first process of a Lightning job: under the rank prefix, as stratlib's jobs start
    # theirs (Launcher.job_command); Lightning starts the others.
    command = rank_command([sys.executable, "-m", PROGRAM, "cases", json.dumps(order)])
    module = order[0]["module"]
    environ = testing.package_environ(module.split(".")[0])
    strategies = ", ".join(repr(case["strategy"]) for case in order)
    folder = Path(order[0]["folder"])
    what = f"Lightning training with {strategies}"
    return watch.run(command, what=what, cwd=folder, env=environ)


def read_reports(case: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every rank's report of a training scenario, in rank order; None if one is missing."""
    folder = Path(case["folder"])
    paths = [folder / f"rank{rank}.json" for rank in range(case["devices"])]
    if not all(path.is_file() for path in paths):
        return None
    return [json.loads(path.read_text(encoding="utf-8")) for path in paths]
