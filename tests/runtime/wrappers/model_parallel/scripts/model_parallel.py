"""A small transformer block trained with 'model_parallel' on 4 CPU ranks over gloo: a
data_parallel_size x tensor_parallel_size mesh of 2 x 2, column- and row-parallel linears
inside each tensor-parallel pair, FSDP2 across the pairs.

Launches, one after the other on the same processes:

- ``train``: STEPS steps; the full state dict and what each rank saw;
- ``save``: SAVED steps, then a checkpoint holding the model, the optimizer and the step;
- ``resume``: a fresh model and optimizer restored from it, then the remaining steps;

``save`` and ``resume`` run twice: with a sharded checkpoint, then with one full file.

Rank 0 writes the reports to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import stratlib

BATCH, SEQUENCE, FEATURES, DIM, HEADS = 8, 4, 8, 16, 4
STEPS, SAVED = 3, 2


class Block(nn.Module):
    """Pre-norm attention and MLP. Head counts follow from the projections' widths, so the
    same code runs on a tensor-parallel shard holding some of the heads."""

    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(DIM)
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.mlp_norm = nn.LayerNorm(DIM)
        self.w1 = nn.Linear(DIM, 4 * DIM)
        self.w2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        head_dim = DIM // HEADS
        h = self.attention_norm(x)
        q, k, v = (
            w(h).view(batch, sequence, -1, head_dim).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attention.transpose(1, 2).reshape(batch, sequence, -1))
        return x + self.w2(F.gelu(self.w1(self.mlp_norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, DIM)
        self.block = Block()
        self.head = nn.Linear(DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(x)))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQUENCE, FEATURES, generator=generator)
    return x, torch.randn(BATCH, SEQUENCE, 1, generator=generator)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def parallelize(model: nn.Module, device_mesh: Any) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan = {
        "wq": ColwiseParallel(),
        "wk": ColwiseParallel(),
        "wv": ColwiseParallel(),
        "wo": RowwiseParallel(),
        "w1": ColwiseParallel(),
        "w2": RowwiseParallel(),
    }
    parallelize_module(model.block, device_mesh["tensor_parallel"], plan)
    fully_shard(model.block, mesh=device_mesh["data_parallel"])
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


def my_rows(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    sampler = strategy.distributed_sampler_kwargs
    x, y = batch()
    share = BATCH // sampler["num_replicas"]
    rows = slice(sampler["rank"] * share, (sampler["rank"] + 1) * share)
    return x[rows], y[rows]


def steps(strategy: Any, model: nn.Module, optimizer: Any, count: int) -> None:
    x, y = my_rows(strategy)
    for _ in range(count):
        strategy.backward(F.mse_loss(model(x), y))
        strategy.optimizer_step(optimizer)


def full_state(strategy: Any, model: nn.Module) -> dict[str, Any]:
    return {k: v.tolist() for k, v in strategy.get_module_state_dict(model).items()}


def train(strategy: Any) -> dict[str, Any]:
    model = build_model()
    optimizer = make_optimizer(model)
    model, optimizer = strategy.setup(model, optimizer)
    steps(strategy, model, optimizer, STEPS)
    rank = torch.tensor([float(strategy.global_rank)])
    one = torch.ones(1)
    w1 = model.block.w1.weight
    return {
        "mesh": {
            "shape": list(strategy.device_mesh.shape),
            "dims": list(strategy.device_mesh.mesh_dim_names),
        },
        # Every rank's sampler arguments and the rows of w1 and wo it holds.
        "samplers": strategy.all_gather(
            torch.tensor(list(strategy.distributed_sampler_kwargs.values()))
        ).tolist(),
        "w1_placements": [repr(p) for p in w1.placements],
        "w1_local_shape": list(w1.to_local().shape),
        "sum_world": strategy.reduce(one, reduce_op="sum").item(),
        "sum_tensor_parallel": strategy.reduce(
            one, group="tensor_parallel", reduce_op="sum"
        ).item(),
        "sum_data_parallel": strategy.reduce(one, group="data_parallel", reduce_op="sum").item(),
        "gather_tensor_parallel": strategy.all_gather(rank, group="tensor_parallel")
        .flatten()
        .tolist(),
        "gather_data_parallel": strategy.all_gather(rank, group="data_parallel").flatten().tolist(),
        "params": full_state(strategy, model),
    }


def save(strategy: Any, path: str) -> dict[str, Any]:
    model = build_model()
    optimizer = make_optimizer(model)
    model, optimizer = strategy.setup(model, optimizer)
    steps(strategy, model, optimizer, SAVED)
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": SAVED}, path)
    return {"is_dir": Path(path).is_dir(), "is_file": Path(path).is_file()}


def resume(strategy: Any, path: str) -> dict[str, Any]:
    torch.manual_seed(123)  # different initial weights: all must come from the checkpoint
    model = Net()
    optimizer = make_optimizer(model)
    model, optimizer = strategy.setup(model, optimizer)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    steps(strategy, model, optimizer, STEPS - remaining["step"])
    whole = strategy.load_checkpoint(path)
    return {
        "remaining": remaining,
        "whole_keys": sorted(whole),
        "whole_model": {k: v.tolist() for k, v in whole["model"].items()},
        "params": full_state(strategy, model),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    def strategy(distributed: bool) -> Any:
        return stratlib.get_strategy(
            "model_parallel",
            accelerator="cpu",
            devices=4,
            parallelize_fn=parallelize,
            data_parallel_size=2,
            tensor_parallel_size=2,
            save_distributed_checkpoint=distributed,
            timeout=120,
        )

    from milestones import reached

    report: dict[str, Any] = {"train": reached(args.out, "train", strategy(True).launch(train))}
    for kind, distributed in (("sharded", True), ("full", False)):
        path = str(Path(args.out) / ("sharded" if distributed else "full.ckpt"))
        report[kind] = {
            "save": reached(args.out, f"save {kind}", strategy(distributed).launch(save, path)),
            "resume": reached(
                args.out, f"resume {kind}", strategy(distributed).launch(resume, path)
            ),
        }
    if os.environ.get("LOCAL_RANK", "0") == "0":
        (Path(args.out) / "result.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
