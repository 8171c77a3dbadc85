"""Training cases of a device spec's strategies on the project's test device, in one job.

``python device_job.py PREFIX FOLDER CASE [CASE ...]``: each case builds a strategy of the spec
whose strategies are named ``<PREFIX>_...`` (``generic_ddp``, ``npu_fsdp``, ...) for the devices
of this machine (the test device, under the spec's device type), launches it once on the
reference problem of ``stratcore.testing`` and, on rank 0, prints ``CASE <name> <json>``: the
parameters it ended with, gathered whole, the device type it trained on and the precision; or
the error. The cases of one job share its processes, as the launches of one script do; a case
that starts processes in its own way (``ddp_spawn``) or reads what an earlier job wrote
(``resume``) runs in a job of its own.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from stratcore import testing
from torch import nn

import stratlib

PREFIX, FOLDER, CASES = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
STEPS, SAVED, LR = 3, 2, 0.1
CHECKPOINT = FOLDER / "checkpoint"


def my_share(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's share of the reference batch, on its device: by its data-parallel rank
    (processes of one tensor-parallel or pipeline group read the same samples)."""
    sampler = getattr(strategy, "distributed_sampler_kwargs", None) or {}
    rank = sampler.get("rank", strategy.global_rank)
    replicas = sampler.get("num_replicas", strategy.world_size)
    x, y = testing.reference_batch()
    x, y = testing.shard(x, rank, replicas), testing.shard(y, rank, replicas)
    return x.to(strategy.root_device), y.to(strategy.root_device)


def report(strategy: Any, model: nn.Module) -> dict[str, Any]:
    state = strategy.get_module_state_dict(model)
    return {
        "params": [t.detach().cpu().double().tolist() for t in state.values()],
        "device_type": strategy.root_device.type,
        "precision": strategy.precision_plugin.precision,
        "world_size": strategy.world_size,
        "grad_scaler": type(getattr(strategy.precision_plugin, "scaler", None)).__name__,
    }


def train(strategy: Any, steps: int = STEPS, start: str | None = None) -> dict[str, Any]:
    """``steps`` SGD steps of the reference model (resumed from ``start``, if given)."""
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    if start is not None:
        strategy.load_checkpoint(start, {"model": model, "optimizer": optimizer})
    x, y = my_share(strategy)
    for _ in range(steps):
        strategy.backward(nn.functional.mse_loss(model(x), y))
        strategy.optimizer_step(optimizer)
    return report(strategy, model)


def save(strategy: Any) -> dict[str, Any]:
    """``SAVED`` steps, then a checkpoint (sharded, where the strategy writes one) on disk."""
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = my_share(strategy)
    for _ in range(SAVED):
        strategy.backward(nn.functional.mse_loss(model(x), y))
        strategy.optimizer_step(optimizer)
    strategy.save_checkpoint({"model": model, "optimizer": optimizer}, CHECKPOINT)
    return report(strategy, model)


def parallelize(module: nn.Module, device_mesh: Any) -> nn.Module:
    """The reference model on a (data_parallel, tensor_parallel) mesh: its first Linear
    column-parallel, its last row-parallel, ``fully_shard`` over the data dimension."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    parallelize_module(module, device_mesh["tensor_parallel"], plan)
    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def pipeline(strategy: Any) -> dict[str, Any]:
    """The reference model cut into two stages, one a process, trained through the schedule."""
    model = testing.reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = my_share(strategy)
    for _ in range(STEPS):
        strategy.forward_backward(model, x, target=y, loss_fn=nn.functional.mse_loss)
        strategy.optimizer_step(optimizer)
    return report(strategy, model)


def strategy_of(case: str) -> tuple[Any, Callable[[Any], dict[str, Any]]]:
    """The strategy a case trains with, and what it runs in each process."""
    devices = torch.accelerator.device_count()
    if case == "ddp_spawn":
        return stratlib.get_strategy(f"{PREFIX}_ddp_spawn", devices=2), train
    if case.startswith("precision_"):
        precision = case.removeprefix("precision_")
        return stratlib.get_strategy(f"{PREFIX}_ddp", devices=2, precision=precision), train
    if case.startswith("deepspeed_stage_"):
        return stratlib.get_strategy(f"{PREFIX}_{case}", devices=2), train
    if case == "hsdp":
        strategy = stratlib.get_strategy(
            f"{PREFIX}_fsdp",
            devices=devices,
            sharding_strategy="HYBRID_SHARD",
            device_mesh=[2, 2],
        )
        return strategy, train
    if case == "dp_tp":
        strategy = stratlib.get_strategy(
            f"{PREFIX}_model_parallel",
            devices=devices,
            data_parallel_size=2,
            tensor_parallel_size=2,
            parallelize_fn=parallelize,
        )
        return strategy, train
    if case == "pipeline":
        strategy = stratlib.get_strategy(
            f"{PREFIX}_model_parallel", devices=2, pp=2, pipeline_split=["2"], microbatches=2
        )
        return strategy, pipeline
    if case == "save":
        return stratlib.get_strategy(f"{PREFIX}_fsdp", devices=2), save
    if case == "resume":
        strategy = stratlib.get_strategy(f"{PREFIX}_fsdp", devices=2)
        return strategy, lambda s: train(s, STEPS - SAVED, start=str(CHECKPOINT))
    raise SystemExit(f"unknown case {case!r}")


def launching() -> bool:
    """Whether this is the process the job started with (the others are ranks the launcher
    started by running this script again): it reports."""
    return os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0"


def main() -> None:
    for case in CASES:
        strategy, run = strategy_of(case)
        result = strategy.launch(run)
        strategy.teardown()
        if launching():
            print(f"CASE {case} {json.dumps(result)}", flush=True)


if __name__ == "__main__":  # spawned processes import this module, and run none of it
    main()
