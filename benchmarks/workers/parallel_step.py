"""Train one MLP on a 2 x 2 mesh of CPU ranks (gloo), laid out by stratlib and by hand, and
time every step of both.

``python -m benchmarks.workers.parallel_step --layout LAYOUT [LAYOUT ...] ... --out result.json``

Three layouts, each given a launch of its own, one after the other in the same processes:

- ``2d``: 'model_parallel' against tensor parallelism over pairs of ranks (column-parallel
  then row-parallel Linear layers) and FSDP2 across the pairs, on a
  ``(data_parallel, tensor_parallel)`` DeviceMesh built by hand;
- ``hsdp``: 'fsdp' with ``sharding_strategy='HYBRID_SHARD'`` against FSDP2 on a
  ``(replicate, shard)`` mesh built by hand, every Linear layer a group of its own;
- ``pp``: 'model_parallel' with ``pp=2, dp_shard=2`` (the model cut in the middle by
  ``pipeline_split``, the 1F1B schedule over MICROBATCHES microbatches, ``forward_backward``)
  against the same schedule written by hand with ``torch.distributed.pipelining``: a
  ``(pp, dp)`` mesh, each stage's half of the layers sharded with ``fully_shard`` over ``dp``
  in a ``PipelineStage``, ``Schedule1F1B.step``, then the last stage's loss summed over the
  pipeline group, as ``forward_backward`` does so that every process has the loss; and the
  schedule alone, without that sum (``torch_schedule_alone``).

Both models train in the same four processes, which the stratlib strategy starts: each
iteration runs one step of each, in alternating order, so the machine's load (this benchmark
runs 4 ranks on however few cores there are) falls on both alike. The hand-written side uses
torch.distributed directly: its own mesh, ``parallelize_module`` / ``fully_shard`` calls,
``loss.backward()``, ``optimizer.step()`` and ``zero_grad``. Rank 0 writes both lists of step
times, by layout.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .ddp_step import _loss, make_batches, prepare_threads

LAYOUTS = ("2d", "hsdp", "pp")
RANKS = 4
MESH = (2, 2)
MICROBATCHES = 4


@dataclass(frozen=True)
class Config:
    width: int
    depth: int
    batch: int
    warmup: int
    steps: int
    threads: int
    ranks: int = RANKS


def build_model(cfg: Config) -> Any:
    """``depth`` pairs of Linear layers (the first of a pair column-parallel, the second
    row-parallel under tensor parallelism), with ReLUs between them."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for index in range(2 * cfg.depth):
        layers.append(nn.Linear(cfg.width, cfg.width))
        if index < 2 * cfg.depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def parallelize(model: Any, device_mesh: Any) -> Any:
    """Tensor parallelism over ``device_mesh['tensor_parallel']``, FSDP2 over
    ``device_mesh['data_parallel']``: the same function for both sides of the comparison."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    linears = [name for name, module in model.named_children() if isinstance(module, nn.Linear)]
    plan = {
        name: ColwiseParallel() if index % 2 == 0 else RowwiseParallel()
        for index, name in enumerate(linears)
    }
    parallelize_module(model, device_mesh["tensor_parallel"], plan)
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


def shard_hybrid(model: Any, mesh: Any) -> Any:
    """Every Linear layer its own FSDP2 group on the (replicate, shard) mesh, then the root."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    for module in model:
        if isinstance(module, nn.Linear):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def data_rank(layout: str, rank: int) -> int:
    """Which batch a rank reads: the ranks of a tensor-parallel pair, or the two stages of a
    pipeline, read the same one."""
    if layout == "2d":
        return rank // MESH[1]
    return rank % MESH[1] if layout == "pp" else rank


def split_point(cfg: Config) -> int:
    """The index of the Sequential's first module in the second pipeline stage: the second
    half of the Linear layers."""
    return 2 * cfg.depth  # Linear, ReLU, ... : entry 2 * depth starts the second half


# --- the two sides ---------------------------------------------------------------------------


def by_hand(layout: str, cfg: Config) -> Any:
    """The layout written with torch.distributed alone; returns a step function."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    if layout == "pp":
        return _pipeline_by_hand(cfg)
    if layout == "2d":
        mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("data_parallel", "tensor_parallel"))
        model = parallelize(build_model(cfg), mesh)
    else:
        mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("replicate", "shard"))
        model = shard_hybrid(build_model(cfg), mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(inputs: Any, targets: Any) -> None:
        _loss(model, inputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _pipeline_by_hand(cfg: Config, share_loss: bool = True) -> Any:
    """pp=2 x dp=2: this rank's half of the layers in a PipelineStage, fully_shard over dp,
    the 1F1B schedule. With ``share_loss``, each step ends as 'model_parallel''s does: the
    last stage's mean loss summed over the pipeline group (a functional collective, read
    lazily), so that the first stage has it too."""
    import torch
    import torch.distributed._functional_collectives as funcol
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("pp", "dp"))
    index = mesh["pp"].get_local_rank()
    layers = list(build_model(cfg))
    cut = split_point(cfg)
    stage_module = nn.Sequential(*(layers[:cut] if index == 0 else layers[cut:]))
    fully_shard(stage_module, mesh=mesh["dp"])
    group = mesh["pp"].get_group()
    stage = PipelineStage(stage_module, index, MESH[0], torch.device("cpu"), group=group)
    schedule = Schedule1F1B(
        stage, n_microbatches=MICROBATCHES, loss_fn=torch.nn.functional.mse_loss
    )
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.01)
    pending: list[Any] = []

    def step(inputs: Any, targets: Any) -> None:
        losses: list[Any] = []
        if index == 0:
            schedule.step(inputs, losses=losses)
        else:
            schedule.step(target=targets, losses=losses)
        if share_loss:
            if pending:
                pending.pop().wait()
            loss = torch.stack(losses).mean() if losses else torch.zeros(())
            pending.append(funcol.all_reduce(loss, "sum", group=group.group_name))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def settle() -> None:
        """Wait for the last step's loss sum, as 'model_parallel''s teardown does: work left
        running keeps its process group alive past the group's release."""
        while pending:
            pending.pop().wait()

    step.settle = settle  # type: ignore[attr-defined]
    return step


def through_stratlib(strategy: Any, cfg: Config) -> Any:
    import torch

    module = build_model(cfg)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    model, optimizer = strategy.setup(module, optimizer)

    def step(inputs: Any, targets: Any) -> None:
        if getattr(strategy, "pp", None):
            loss = torch.nn.functional.mse_loss
            strategy.forward_backward(model, inputs, target=targets, loss_fn=loss)
        else:
            strategy.backward(_loss(model, inputs, targets))
        strategy.optimizer_step(optimizer)

    return step


def _paired(strategy: Any, layout: str, cfg: Config) -> dict[str, Any] | None:
    launched = prepare_threads(cfg)
    steps = {"stratlib": through_stratlib(strategy, cfg), "torch": by_hand(layout, cfg)}
    if layout == "pp":  # the schedule alone, without the loss reaching the first stage
        steps["torch_schedule_alone"] = _pipeline_by_hand(cfg, share_loss=False)
    batches = make_batches(cfg, data_rank(layout, strategy.global_rank))  # type: ignore[arg-type]
    times: dict[str, list[float]] = {name: [] for name in steps}
    for index in range(cfg.warmup + cfg.steps):
        inputs, targets = batches[index % len(batches)]
        order = list(steps) if index % 2 == 0 else list(reversed(steps))
        for name in order:
            started = time.perf_counter()
            steps[name](inputs, targets)
            if index >= cfg.warmup:
                times[name].append(time.perf_counter() - started)
    for step in steps.values():
        settle = getattr(step, "settle", None)
        if settle is not None:
            settle()
    if not strategy.is_global_zero:
        return None
    return {"step_times": times, "threads_as_launched": launched}


def run(layout: str, cfg: Config) -> dict[str, Any] | None:
    import stratlib

    options: dict[str, Any]
    if layout == "2d":
        name = "model_parallel"
        options = {
            "parallelize_fn": parallelize,
            "data_parallel_size": MESH[0],
            "tensor_parallel_size": MESH[1],
        }
    elif layout == "pp":
        name = "model_parallel"
        options = {
            "pp": MESH[0],
            "dp_shard": MESH[1],
            "pipeline_split": [str(split_point(cfg))],
            "pipeline_schedule": "1F1B",
            "microbatches": MICROBATCHES,
        }
    else:
        name = "fsdp"
        options = {
            "sharding_strategy": "HYBRID_SHARD",
            "device_mesh": MESH,
            "auto_wrap_layers": ["torch.nn.Linear"],
        }
    strategy = stratlib.get_strategy(name, accelerator="cpu", devices=cfg.ranks, **options)
    result: dict[str, Any] | None = strategy.launch(_paired, layout, cfg)
    return result


# --- entry point ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=LAYOUTS, nargs="+", required=True)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = Config(args.width, args.depth, args.batch, args.warmup, args.steps, args.threads)
    layouts = {layout: run(layout, cfg) for layout in args.layout}
    if None in layouts.values():  # a rank other than 0, started again by the launcher
        return
    import torch

    result = {"layouts": layouts, "config": asdict(cfg), "torch": torch.__version__}
    args.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
