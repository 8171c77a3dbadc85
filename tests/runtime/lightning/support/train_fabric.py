"""Fabric(strategy='acme_parallel', accelerator='acme', devices=2): a training loop.

Run as a script: fabric.launch() starts the second rank by running it again. Each rank writes
rank<N>.json into the directory given as the first argument.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import acme
import acme.lightning_fabric  # noqa: F401  (registers 'acme' and 'acme_parallel')
import common
import torch
from lightning.fabric import Fabric
from torch import nn


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    fabric = Fabric(strategy="acme_parallel", accelerator="acme", devices=2)
    fabric.launch()
    net = common.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=common.LR)
    model, optimizer = fabric.setup(net, optimizer)
    x, y = common.data()
    rank, size = fabric.global_rank, fabric.world_size
    x, y = x[rank::size].to(fabric.device), y[rank::size].to(fabric.device)
    for _ in range(steps):
        optimizer.zero_grad()
        fabric.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()

    def reduce(tensor: torch.Tensor, op: str = "mean") -> Any:
        return fabric.all_reduce(tensor, reduce_op=op)

    ints = torch.tensor([rank + 1, 10 * (rank + 1)], dtype=torch.int64)
    report = {
        "rank": rank,
        "world_size": size,
        "weights": {n: p.detach().flatten().tolist() for n, p in net.named_parameters()},
        "calls": acme.CALLS,
        "mean_int64": reduce(ints, "mean").tolist(),
        "sum_int64": reduce(ints, "sum").tolist(),
        "sum_int64_dtype": str(reduce(ints, "sum").dtype),
        "mean_float": reduce(torch.tensor([2.0 * rank + 1.0])).tolist(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
