"""'model_parallel' with the named dimensions on 4 CPU ranks over gloo, three layouts launched
one after the other on the same processes:

- ``hsdp``: dp_replicate=2 x dp_shard=2, sharded by the strategy itself (no parallelize_fn);
  every dimension's size seen through reductions over it;
- ``cp``: dp_shard=2 x cp=2 with a model that works token by token (no attention), each
  process given its half of every sequence; and torch's context-parallel attention asked
  for on the CPU;
- ``tp``: tp=2 x dp_shard=2, an attention block laid out by a parallelize_fn over
  ``device_mesh["tp"]`` and ``device_mesh.fsdp_mesh``.

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
from stratcore.exceptions import MisconfigurationError
from torch import nn

import stratlib

BATCH, SEQUENCE, FEATURES, DIM, HEADS = 8, 4, 8, 16, 4
STEPS = 3
LR = 1e-2
LAYOUTS = {
    "hsdp": {"dp_replicate": 2, "dp_shard": 2},
    "cp": {"dp_shard": 2, "cp": 2},
    "tp": {"tp": 2, "dp_shard": 2},
}
DIMENSIONS = ("pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "fsdp", "dp_cp")


class TokenWise(nn.Module):
    """An MLP applied to every token alone: a split sequence computes what the whole does."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.w1 = nn.Linear(DIM, 2 * DIM)
        self.w2 = nn.Linear(2 * DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(self.norm(self.embed(x)))))


class Attention(nn.Module):
    """A pre-norm attention and MLP block; head counts follow from the projections' widths,
    so the same code runs on a tensor-parallel shard holding some of the heads."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.w1 = nn.Linear(DIM, 2 * DIM)
        self.w2 = nn.Linear(2 * DIM, DIM)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        x = self.embed(x)
        h = self.norm(x)
        q, k, v = (
            w(h).view(batch, sequence, -1, DIM // HEADS).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attention.transpose(1, 2).reshape(batch, sequence, -1))
        return self.head(x + self.w2(F.gelu(self.w1(x))))


def build_model(layout: str) -> nn.Module:
    torch.manual_seed(0)
    return Attention() if layout == "tp" else TokenWise()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQUENCE, FEATURES, generator=generator)
    return x, torch.randn(BATCH, SEQUENCE, 1, generator=generator)


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
    parallelize_module(model, device_mesh["tp"], plan)
    fully_shard(model, mesh=device_mesh.fsdp_mesh)
    return model


def my_rows(strategy: Any, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's samples (``distributed_sampler_kwargs``) and, with context
    parallelism, its half of every sequence."""
    sampler = strategy.distributed_sampler_kwargs
    x, y = batch()
    share = BATCH // sampler["num_replicas"]
    rows = slice(sampler["rank"] * share, (sampler["rank"] + 1) * share)
    x, y = x[rows], y[rows]
    if layout == "cp":
        cp = strategy.mesh("cp")
        part = SEQUENCE // cp.size()
        tokens = slice(cp.get_local_rank() * part, (cp.get_local_rank() + 1) * part)
        x, y = x[:, tokens], y[:, tokens]
    return x, y


def train(strategy: Any, layout: str) -> dict[str, Any]:
    model = build_model(layout)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = my_rows(strategy, layout)
    losses = []
    for _ in range(STEPS):
        loss = strategy.forward_backward(model, x, target=y, loss_fn=F.mse_loss)
        strategy.optimizer_step(optimizer)
        losses.append(strategy.reduce(loss, group="dp_cp").item())
    one = torch.ones(1)
    weight = model.embed.weight
    report: dict[str, Any] = {
        "mesh": {
            "shape": list(strategy.device_mesh.shape),
            "dims": list(strategy.device_mesh.mesh_dim_names),
        },
        "fsdp_mesh": list(strategy.device_mesh.fsdp_mesh.mesh_dim_names),
        "sizes": {
            name: strategy.reduce(one, group=name, reduce_op="sum").item() for name in DIMENSIONS
        },
        "samplers": strategy.all_gather(
            torch.tensor(list(strategy.distributed_sampler_kwargs.values()))
        ).tolist(),
        "placements": [repr(p) for p in weight.placements],
        "losses": losses,
        "params": {k: v.tolist() for k, v in strategy.get_module_state_dict(model).items()},
    }
    if layout == "cp":
        try:
            with strategy.context_parallel([x, y], seq_dims=[1, 1]):
                pass
        except MisconfigurationError as error:
            report["context_parallel_error"] = str(error)
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from milestones import reached

    report = {}
    for layout, sizes in LAYOUTS.items():
        options: dict[str, Any] = {"parallelize_fn": parallelize} if layout == "tp" else {}
        strategy = stratlib.get_strategy(
            "model_parallel", accelerator="cpu", devices=4, timeout=120, **sizes, **options
        )
        report[layout] = reached(args.out, layout, strategy.launch(train, layout))
    if os.environ.get("LOCAL_RANK", "0") == "0":
        (Path(args.out) / "result.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
