"""One script that trains with DDP on 2 ranks in every precision, one ``launch`` each.

The ranks that the first launch starts run this whole script too, so they take part in every
later launch; the process group is created and destroyed once per launch. Precisions are
given as users type them ('32', '64', '16', 'bf16', '16-true', 'bf16-true'). Rank 0 writes
every launch's report to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn

import stratlib

PRECISIONS = ("32", "64", "16", "bf16", "16-true", "bf16-true")


def train(strategy: stratlib.StrategyBase, steps: int) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    activations: list[torch.dtype] = []
    strategy.lightning_module[0].register_forward_hook(lambda m, i, o: activations.append(o.dtype))

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 8, generator=generator)
    y = torch.randn(16, 1, generator=generator)
    share = 16 // strategy.world_size
    rows = slice(strategy.global_rank * share, (strategy.global_rank + 1) * share)
    x, y = x[rows].to(strategy.root_device), y[rows].to(strategy.root_device)

    losses = []
    for _ in range(steps):
        output = model(x)
        loss = nn.functional.mse_loss(output, y.to(output.dtype))
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        losses.append(strategy.reduce(loss.detach().double(), reduce_op="mean").item())
    state = strategy.get_module_state_dict(model)
    return {
        "precision": strategy.precision_plugin.precision,
        "plugin": type(strategy.precision_plugin).__name__,
        "scaler": type(getattr(strategy.precision_plugin, "scaler", None)).__name__,
        "losses": losses,
        "params": [t.detach().cpu().double().tolist() for t in state.values()],
        "param_dtype": str(next(iter(state.values())).dtype),
        "activation_dtype": str(activations[0]),
        "output_dtype": str(output.dtype),
        "world_size": strategy.world_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    reports = {}
    for precision in PRECISIONS:
        strategy = stratlib.get_strategy(
            args.strategy, accelerator="cpu", devices=2, precision=precision
        )
        reports[precision] = strategy.launch(train, args.steps)
    if strategy.global_rank == 0:
        Path(args.out, "result.json").write_text(json.dumps(reports), encoding="utf-8")


if __name__ == "__main__":
    main()
