"""Pipeline parallelism with 'model_parallel' on 4 CPU ranks over gloo: pp=2 x dp_shard=2,
a model of four pre-norm attention blocks written as torchtitan writes its models (absent
parts are skipped), trained with Adam.

Launches, one after the other on the same processes:

- ``1F1B``: cut by ``pipeline_split=["layers.2"]``; STEPS steps; the mesh, every rank's
  sampler arguments, reductions over the pipeline and data dimensions, forward passes
  through the pipeline, the losses and the full state dict;
- ``GPipe``: the same stages made by a ``pipeline_fn``;
- ``Interleaved1F1B``: four stages, two per process;
- ``save`` then ``resume``: SAVED steps and a distributed checkpoint, then a fresh model
  restored from it for the remaining steps; the checkpoint loaded whole;
- ``save_full`` then ``resume_full``: the same with one full file.

Rank 0 writes the reports to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import stratlib

BATCH, SEQUENCE, FEATURES, DIM, HEADS, LAYERS = 8, 4, 8, 16, 4, 4
STEPS, SAVED, MICROBATCHES = 3, 2, 2
LR = 1e-2


class Block(nn.Module):
    """Pre-norm attention and MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(DIM)
        self.wqkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.mlp_norm = nn.LayerNorm(DIM)
        self.w1 = nn.Linear(DIM, 2 * DIM)
        self.w2 = nn.Linear(2 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        q, k, v = (
            t.view(batch, sequence, HEADS, DIM // HEADS).transpose(1, 2)
            for t in self.wqkv(self.attention_norm(x)).chunk(3, dim=-1)
        )
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attention.transpose(1, 2).reshape(batch, sequence, DIM))
        return x + self.w2(F.gelu(self.w1(self.mlp_norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.head(h) if self.head is not None else h


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQUENCE, FEATURES, generator=generator)
    return x, torch.randn(BATCH, SEQUENCE, 1, generator=generator)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=LR)


def stage_fn(model: nn.Module, index: int, count: int) -> nn.Module:
    """A pipeline_fn: stage 0 is the embedding and the first half of the layers, stage 1 the
    rest (torchtitan's way: a copy of the model with the other stage's parts removed)."""
    stage = copy.deepcopy(model)
    half = LAYERS // 2
    keep = range(half) if index == 0 else range(half, LAYERS)
    for key in [k for k in stage.layers._modules if int(k) not in keep]:
        del stage.layers._modules[key]
    if index == 0:
        stage.norm = stage.head = None
    else:
        stage.embed = None
    return stage


def my_rows(strategy: Any) -> tuple[torch.Tensor, torch.Tensor]:
    sampler = strategy.distributed_sampler_kwargs
    x, y = batch()
    share = BATCH // sampler["num_replicas"]
    rows = slice(sampler["rank"] * share, (sampler["rank"] + 1) * share)
    return x[rows], y[rows]


def steps(strategy: Any, model: nn.Module, optimizer: Any, count: int) -> list[float]:
    """``count`` training steps; the loss of each over the whole batch (the mean over the
    data-parallel replicas of each one's loss)."""
    x, y = my_rows(strategy)
    losses = []
    for _ in range(count):
        loss = strategy.forward_backward(model, x, target=y, loss_fn=F.mse_loss)
        strategy.optimizer_step(optimizer)
        losses.append(strategy.reduce(loss, group="dp").item())
    return losses


def full_state(strategy: Any, model: nn.Module) -> dict[str, Any]:
    return {k: v.tolist() for k, v in strategy.get_module_state_dict(model).items()}


def train(strategy: Any) -> dict[str, Any]:
    model = build_model()
    optimizer = make_optimizer(model)
    model, optimizer = strategy.setup(model, optimizer)
    losses = steps(strategy, model, optimizer, STEPS)
    rank = torch.tensor([float(strategy.global_rank)])
    output = model(my_rows(strategy)[0])
    report = {
        "losses": losses,
        "local_parameters": sorted(name for name, _ in model.named_parameters()),
        "params": full_state(strategy, model),
        "outputs": strategy.all_gather(
            output if output is not None else torch.full((BATCH // 2, SEQUENCE, 1), float("nan"))
        ).tolist(),
    }
    if strategy.pipeline_schedule == "1F1B":
        mesh = strategy.device_mesh
        report.update(
            mesh={"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names)},
            samplers=strategy.all_gather(
                torch.tensor(list(strategy.distributed_sampler_kwargs.values()))
            ).tolist(),
            gather_pp=strategy.all_gather(rank, group="pp").flatten().tolist(),
            gather_dp=strategy.all_gather(rank, group="dp").flatten().tolist(),
            sum_fsdp=strategy.reduce(torch.ones(1), group="fsdp", reduce_op="sum").item(),
        )
    return report


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
    out = Path(args.out)

    def strategy(schedule: str = "1F1B", distributed: bool = True, **options: Any) -> Any:
        if "pipeline_fn" not in options:
            split = (
                ["layers.2"]
                if schedule != "Interleaved1F1B"
                else ["layers.1", "layers.2", "layers.3"]
            )
            options["pipeline_split"] = split
        return stratlib.get_strategy(
            "model_parallel",
            accelerator="cpu",
            devices=4,
            pp=2,
            dp_shard=2,
            pipeline_schedule=schedule,
            microbatches=MICROBATCHES,
            save_distributed_checkpoint=distributed,
            timeout=120,
            **options,
        )

    from milestones import reached

    report: dict[str, Any] = {}
    report["1F1B"] = reached(out, "1F1B", strategy().launch(train))
    report["GPipe"] = reached(out, "GPipe", strategy("GPipe", pipeline_fn=stage_fn).launch(train))
    report["Interleaved1F1B"] = reached(
        out, "Interleaved1F1B", strategy("Interleaved1F1B").launch(train)
    )
    for kind, distributed in (("sharded", True), ("full", False)):
        path = str(out / ("sharded" if distributed else "full.ckpt"))
        saved = reached(out, f"save {kind}", strategy(distributed=distributed).launch(save, path))
        resumed = reached(
            out, f"resume {kind}", strategy(distributed=distributed).launch(resume, path)
        )
        report[kind] = {"save": saved, "resume": resumed}
    if os.environ.get("LOCAL_RANK", "0") == "0":
        (out / "result.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
