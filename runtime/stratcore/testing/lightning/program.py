"""The training program of the Lightning plugins' cases, in the processes Lightning starts.

``python -m stratcore.testing.lightning.program cases CASES_JSON`` runs each case: a Trainer (or
Fabric) with the plugin's registry name trains the reference model of ``stratcore.testing`` on
this rank's shard of the reference batch, and the process that trained writes ``rank<N>.json``
into the case's folder. A rank Lightning started by running the command again takes part only
in the cases whose launcher started it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from stratcore.lightning import check_lightning_version
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

check_lightning_version()  # before Lightning is imported

import lightning.pytorch as pl  # noqa: E402
from stratcore import testing  # noqa: E402
from stratcore.exceptions import MisconfigurationError, MissingDependencyError  # noqa: E402

from .runner import LR, PROGRAM  # noqa: E402


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


def _full_values(model: nn.Module, wrapped: nn.Module) -> list[torch.Tensor]:
    """The reference ``model``'s parameters, whole on every rank, however the strategy laid
    them out: DTensors on a mesh (FSDP2, tensor parallelism) are gathered, and so are the flat
    shards of torch's FSDP1 (Lightning's FSDPStrategy), whose root is in ``wrapped``."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    roots = [m for m in wrapped.modules() if isinstance(m, FullyShardedDataParallel)]
    gathered = (
        FullyShardedDataParallel.summon_full_params(roots[0], writeback=False)
        if roots
        else contextlib.nullcontext()
    )
    with gathered:
        return [
            (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
            for v in model.state_dict().values()
        ]


def _write_report(
    folder: Path, rank: int, world_size: int, precision: str, model: nn.Module, wrapped: nn.Module
) -> None:
    """One rank's report, written by the process that trained (a spawned one, too): the
    reference ``model`` as it ended, inside the module the strategy ``wrapped``."""
    values = _full_values(model, wrapped)
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
        wrapped = trainer.strategy.model
        assert wrapped is not None  # the strategy holds the model it trained
        _write_report(
            self.folder, trainer.global_rank, trainer.world_size, precision, self.model, wrapped
        )


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
    _write_report(folder, fabric.global_rank, fabric.world_size, precision, model, wrapped)


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
    """``python -m stratcore.testing.lightning.program cases CASES_JSON``: run the cases of a
    plugin job; the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "cases":
        print(f"usage: python -m {PROGRAM} cases CASES_JSON", file=sys.stderr)
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
