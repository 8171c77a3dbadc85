"""Test support for the Lightning target: the generated tests (and yours) check that plugins
are registered, and train through a real Trainer or Fabric on real processes.

A training scenario runs as ``python -m stratcore.lightning.testing FRAMEWORK MODULE STRATEGY
ACCELERATOR DEVICES PRECISION STEPS FOLDER`` in a fresh process: Lightning's launcher starts the
other ranks by running the same command again, as it does for users' scripts, or spawns them.
Every rank trains the reference model of :mod:`stratcore.testing` on its shard of the
reference batch and writes ``rank<N>.json`` into FOLDER from the process that trained; the test
compares the weights with one process training on the whole batch.
"""

from __future__ import annotations

import functools
import importlib
import json
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
from ..registry import registry_of  # noqa: E402
from .contract import DEVICE_LIMITS, FRAMEWORKS  # noqa: E402

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


def runnable_or_skip(plugin: type) -> str:
    """The accelerator a strategy plugin trains on here, or skip the calling test with the
    reason it cannot (a missing package, no such device on this machine)."""
    import pytest

    spec = plugin.spec  # type: ignore[attr-defined]
    accelerator = testing.runnable_accelerator(spec)
    reason = testing.unavailable_reason(spec, accelerator)
    if reason is None:
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


def run_training(
    framework: str,
    module: str,
    strategy: str,
    accelerator: str,
    devices: int,
    precision: str,
    folder: Path,
    steps: int = 3,
) -> list[dict[str, Any]]:
    """Run the training scenario; returns every rank's report, in rank order. It fails only
    when its processes stop making progress (``stratcore.watch``), not on a time limit."""
    command = [sys.executable, "-m", __name__, framework, module, strategy, accelerator]
    command += [str(devices), precision, str(steps), str(folder)]
    environ = testing.package_environ(module.split(".")[0])
    done = watch.run(
        command, what=f"{framework} training with {strategy!r}", cwd=folder, env=environ
    )
    assert done.returncode == 0, (
        f"{framework} training with {strategy!r} failed (exit {done.returncode}):\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    reports = []
    for rank in range(devices):
        path = folder / f"rank{rank}.json"
        assert path.is_file(), f"rank {rank} wrote no report:\n{done.stderr[-4000:]}"
        reports.append(json.loads(path.read_text(encoding="utf-8")))
    return reports


def assert_trains_like_one_process(
    framework: str, module: str, plugin: type, folder: Path, devices: int = 2, steps: int = 3
) -> None:
    """Train with ``plugin`` (by its registry name) on ``devices`` processes; every rank ends
    with the parameters of one process training on the whole batch, within the precision's
    tolerance."""
    accelerator = runnable_or_skip(plugin)
    precision = scenario_precision(plugin, accelerator)
    name = plugin.strategy_name  # type: ignore[attr-defined]
    reports = run_training(framework, module, name, accelerator, devices, precision, folder, steps)
    dtype = testing.reference_dtype(precision)
    expected = testing.reference_parameters(steps, LR, dtype)
    tolerance = testing.precision_tolerance(precision)
    if framework == "fabric" and precision == "64-true":
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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 8 or args[0] not in FRAMEWORKS:
        print(
            "usage: python -m stratcore.lightning.testing pytorch|fabric MODULE STRATEGY "
            "ACCELERATOR DEVICES PRECISION STEPS FOLDER",
            file=sys.stderr,
        )
        return 2
    framework, module, strategy, accelerator = args[:4]
    devices, precision, steps, folder = int(args[4]), args[5], int(args[6]), Path(args[7])
    importlib.import_module(module)  # registers the plugins
    run = _trainer if framework == "pytorch" else _fabric
    try:
        run(strategy, accelerator, devices, precision, steps, folder)
    except (MisconfigurationError, MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that classes pickle under their real module name.
    sys.exit(importlib.import_module(__spec__.name).main())
