"""Test support for the Lightning target: the generated tests (and yours) check that plugins
are registered, and train through a real Trainer or Fabric on real processes.

Training scenarios run as ``python -m stratcore.lightning.testing cases CASES_JSON`` in a fresh
process (under ``STRATLIB_RANK_PREFIX``, if set, as a launcher starts a rank), one after the
other (``run_cases``): Lightning's launcher starts the other ranks by running the same command
again, as it does for users' scripts, or spawns them. Every rank trains the reference model of
:mod:`stratcore.testing` on its shard of the reference batch and writes ``rank<N>.json`` into
the scenario's folder from the process that trained; the test compares the weights with one
process training on the whole batch.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from . import check_lightning_version

check_lightning_version()  # before Lightning is imported

import lightning.pytorch as pl  # noqa: E402

from .. import testing, watch  # noqa: E402
from ..exceptions import MisconfigurationError, MissingDependencyError  # noqa: E402
from ..launchers.base import rank_command  # noqa: E402
from ..registry import registry_of  # noqa: E402
from .contract import DEVICE_LIMITS  # noqa: E402

LR = 0.1
#: How close Fabric's '64-true' comes to one process training in float64 (see
#: ``assert_trains_like_one_process``).
FABRIC_DOUBLE_TOLERANCE = 1e-7


def _registries(framework: str) -> tuple[Any, Any]:
    """(accelerator registry, strategy registry) of ``framework``."""
    if framework == "pytorch":
        from lightning.pytorch.accelerators import AcceleratorRegistry
        from lightning.pytorch.strategies import StrategyRegistry

        return AcceleratorRegistry, StrategyRegistry
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
    from lightning.fabric.strategies import STRATEGY_REGISTRY

    return ACCELERATOR_REGISTRY, STRATEGY_REGISTRY


def assert_registered(
    framework: str,
    accelerators: Sequence[type],
    strategies: Sequence[tuple[str, type, dict[str, Any]]],
) -> None:
    """Every accelerator is in ``framework``'s registry under its spec's name, and every
    (registry name, class, preset) resolves to that class with that preset."""
    accelerator_registry, strategy_registry = _registries(framework)
    for cls in accelerators:
        name = cls.spec.name  # type: ignore[attr-defined]
        assert name in accelerator_registry, f"accelerator {name!r} is not registered"
        assert accelerator_registry[name]["accelerator"] is cls, f"{name!r} is another class"
    for name, cls, preset in strategies:
        assert name in strategy_registry, f"strategy {name!r} is not registered"
        entry = strategy_registry[name]
        assert entry["strategy"] is cls, f"{name!r} is {entry['strategy']!r}, not {cls!r}"
        assert entry["init_params"] == preset, f"{name!r} presets {entry['init_params']}"


def runnable_or_skip(plugin: type, devices: int = 1) -> str:
    """The accelerator a strategy plugin trains on ``devices`` processes on here, or skip the
    calling test with the reason it cannot (a missing package, no such device on this machine,
    too few of them)."""
    import pytest

    accelerator = testing.runnable_or_skip(plugin.spec, devices)  # type: ignore[attr-defined]
    reason = device_limit(plugin, accelerator)
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
    strategies = _registries(framework)[1]
    name = plugin.strategy_name  # type: ignore[attr-defined]
    return dict(strategies[name]["init_params"]) if name in strategies else {}


def run_training(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one training scenario (``training_case``) in a job of its own; returns every rank's
    report, in rank order. It fails only when its processes stop making progress
    (``stratcore.watch``), not on a time limit."""
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
    command = rank_command([sys.executable, "-m", __name__, "cases", json.dumps(order)])
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


# --- the scenario, in the processes Lightning starts -------------------------------------------


def _shard(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's share of the reference batch: by its data-parallel rank among the
    data-parallel replicas (``distributed_sampler_kwargs``; processes of one tensor-parallel
    group read the same share), or the whole batch for a single device."""
    sampler = getattr(strategy, "distributed_sampler_kwargs", None) or {}
    rank, replicas = sampler.get("rank", 0), sampler.get("num_replicas", 1)
    x, y = testing.reference_batch()
    return testing.shard(x, rank, replicas), testing.shard(y, rank, replicas)


def _is_model_parallel(strategy: Any) -> bool:
    """Whether ``strategy`` is one of Lightning's ModelParallelStrategy classes, which lay
    the model out on a device mesh themselves (``configure_model``, ``parallelize_fn``)."""
    return any(cls.__name__ == "ModelParallelStrategy" for cls in type(strategy).__mro__[1:])


def parallelize_reference(model: nn.Module, device_mesh: Any) -> nn.Module:
    """The reference model on a ``(data_parallel, tensor_parallel)`` mesh: its first Linear
    column-parallel and its last row-parallel over ``tensor_parallel``, ``fully_shard`` over
    ``data_parallel``."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    parallelize_module(model, device_mesh["tensor_parallel"], plan)
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


def _write_report(
    folder: Path, rank: int, world_size: int, precision: str, model: nn.Module
) -> None:
    """One rank's report, written by the process that trained (a spawned one, too)."""
    from torch.distributed.tensor import DTensor

    values = [  # every rank gathers the parameters laid out on a mesh
        v.full_tensor() if isinstance(v, DTensor) else v for v in model.state_dict().values()
    ]
    report = {
        "rank": rank,
        "world_size": world_size,
        "precision": precision,
        "dtype": str(values[0].dtype),
        # float64 keeps every digit of float64 parameters and is exact for narrower ones.
        "parameters": [v.detach().double().tolist() for v in values],
    }
    (folder / f"rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")


class _Reference(pl.LightningModule):
    """The reference model; every rank feeds its own shard, whole, once per step. Defined at
    module level so that spawning launchers can pickle it."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.model = testing.reference_model()
        self.folder = folder

    def configure_model(self) -> None:
        if _is_model_parallel(self.trainer.strategy):
            parallelize_reference(self.model, self.device_mesh)

    def train_dataloader(self) -> DataLoader[Any]:
        x, y = _shard(self.trainer.strategy)
        return DataLoader(TensorDataset(x, y), batch_size=len(x))

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return testing.reference_loss(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)

    def on_train_end(self) -> None:
        trainer = self.trainer
        precision = trainer.strategy.precision_plugin.precision
        _write_report(self.folder, trainer.global_rank, trainer.world_size, precision, self.model)


def _trainer(
    strategy: str, accelerator: str, devices: int, precision: str, steps: int, folder: Path
) -> None:
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        precision=precision,  # type: ignore[arg-type]
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(_Reference(folder))


def _fabric_train(fabric: Any, steps: int, folder: Path) -> None:
    """The Fabric scenario, in every process ``fabric.launch`` runs it in."""
    model = testing.reference_model()
    if _is_model_parallel(fabric.strategy):
        # The strategy replaces the parameters: the optimizer comes after, as Fabric asks.
        wrapped = fabric.setup_module(model)
        optimizer = fabric.setup_optimizers(torch.optim.SGD(wrapped.parameters(), lr=LR))
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        wrapped, optimizer = fabric.setup(model, optimizer)
    x, y = _shard(fabric.strategy)
    x, y = x.to(fabric.device), y.to(fabric.device)
    for _ in range(steps):
        optimizer.zero_grad()
        fabric.backward(testing.reference_loss(wrapped(x), y))
        optimizer.step()
    precision = fabric.strategy.precision.precision
    _write_report(folder, fabric.global_rank, fabric.world_size, precision, model)


def _fabric(
    strategy: str, accelerator: str, devices: int, precision: str, steps: int, folder: Path
) -> None:
    from lightning.fabric import Fabric

    fabric = Fabric(
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        precision=precision,  # type: ignore[arg-type]
    )
    # With a function, launch works for every launcher: a spawning one runs it in the
    # processes it starts, the others in this process and the ones started like it.
    fabric.launch(functools.partial(_fabric_train, steps=steps, folder=folder))


def _run_case(case: dict[str, Any]) -> None:
    importlib.import_module(case["module"])  # registers the plugins
    run = _trainer if case["framework"] == "pytorch" else _fabric
    run(
        case["strategy"],
        case["accelerator"],
        case["devices"],
        case["precision"],
        case["steps"],
        Path(case["folder"]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stratcore.lightning.testing cases CASES_JSON``: run the cases of a plugin job;
    the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "cases":
        print("usage: python -m stratcore.lightning.testing cases CASES_JSON", file=sys.stderr)
        return 2
    # A process Lightning started for a rank runs this command again: it takes part only in
    # the scenarios whose launcher started it (Lightning set LOCAL_RANK for it).
    started_by_lightning = "LOCAL_RANK" in os.environ
    for case in json.loads(args[1]):
        if started_by_lightning and not case["script"]:
            continue
        try:
            _run_case(case)
        except (MisconfigurationError, MissingDependencyError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that classes pickle under their real module name.
    sys.exit(importlib.import_module(__spec__.name).main())
