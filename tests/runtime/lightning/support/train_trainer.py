"""Trainer(strategy='acme_parallel', accelerator='acme', devices=2): fit, then report.

Run as a script: Lightning's popen launcher starts the second rank by running it again.
Each rank writes rank<N>.json into the directory given as the first argument.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import acme
import acme.lightning_pytorch  # noqa: F401  (registers 'acme' and 'acme_parallel')
import common
import lightning.pytorch as pl
import torch
import torch.distributed as dist
from stratcore import process_group
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = common.model()

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=common.LR)


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    trainer = pl.Trainer(
        strategy="acme_parallel",
        accelerator="acme",
        devices=2,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out),
    )
    module = Module()
    x, y = common.data()
    loader = DataLoader(TensorDataset(x, y), batch_size=common.SAMPLES // 2)
    trainer.fit(module, loader)
    strategy: Any = trainer.strategy
    rank = trainer.global_rank
    ints = torch.tensor([rank + 1, 10 * (rank + 1)], dtype=torch.int64)
    floats = torch.tensor([2.0 * rank + 1.0])
    report = {
        "rank": rank,
        "world_size": trainer.world_size,
        "weights": {n: p.detach().flatten().tolist() for n, p in module.net.named_parameters()},
        "calls": acme.CALLS,
        "process_group_backend": strategy.process_group_backend,
        "dist_backend": str(dist.get_backend()),
        "mean_int64": strategy.reduce(ints, reduce_op="mean").tolist(),
        "mean_int64_dtype": str(strategy.reduce(ints, reduce_op="mean").dtype),
        "sum_int64": strategy.reduce(ints, reduce_op="sum").tolist(),
        "sum_int64_dtype": str(strategy.reduce(ints, reduce_op="sum").dtype),
        "mean_float": strategy.reduce(floats, reduce_op="mean").tolist(),
        "mean_default": strategy.reduce(floats).tolist(),
        "non_tensor": strategy.reduce("text"),
        "ints_untouched": ints.tolist(),
        "environment": type(strategy.cluster_environment).__name__,
        # stratcore's exit handling: a group it created dies at exit, before gloo's threads
        # can abort
        "release_at_exit": process_group.created_by_runtime(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
