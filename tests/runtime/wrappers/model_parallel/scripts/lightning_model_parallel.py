"""Lightning's Trainer with stratlib's 'model_parallel' plugin (on Lightning's own
ModelParallelStrategy) on 4 CPU ranks over gloo: data_parallel_size=2 x
tensor_parallel_size=2, the transformer block of ``model_parallel.py`` laid out by the
LightningModule's ``configure_model`` hook (column- and row-parallel linears, FSDP2 across
the pairs), trained with Adam.

Two fits on the same processes: ``--saved`` steps, then ``trainer.save_checkpoint``
(Lightning's distributed checkpoint); then a module with other initial weights fit from that
checkpoint up to ``--steps``. Rank 0 writes the reports to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from model_parallel import Net, batch, build_model, parallelize
from torch.utils.data import DataLoader, TensorDataset

import stratlib.lightning.pytorch as plugins


class Module(pl.LightningModule):
    def __init__(self, lr: float, seed: int | None = None) -> None:
        super().__init__()
        self.lr = lr
        if seed is None:
            self.net = build_model()
        else:
            torch.manual_seed(seed)
            self.net = Net()
        self.report: dict[str, Any] = {}

    def configure_model(self) -> None:
        mesh = self.device_mesh
        self.report["mesh"] = {"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names)}
        parallelize(self.net, mesh)

    def train_dataloader(self) -> DataLoader[Any]:
        x, y = batch()
        return DataLoader(TensorDataset(x, y), batch_size=len(x) // 2)

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def on_train_end(self) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        strategy = self.trainer.strategy
        sampler = torch.tensor(list(strategy.distributed_sampler_kwargs.values()))
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        self.report.update(
            strategy=type(strategy).__module__ + "." + type(strategy).__name__,
            backend=torch.distributed.get_backend(),
            samplers=self.all_gather(sampler).tolist(),
            global_step=self.trainer.global_step,
            params={k: v.tolist() for k, v in get_model_state_dict(self.net, options=full).items()},
        )


def fit(module: Module, out: Path, steps: int, checkpoint: str | None = None) -> Module:
    trainer = pl.Trainer(
        strategy=plugins.ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2),
        accelerator="cpu",
        devices=4,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, ckpt_path=checkpoint)
    if checkpoint is None:
        trainer.save_checkpoint(out / "saved.ckpt")
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--saved", type=int, required=True, help="steps before the checkpoint")
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    from milestones import reached

    saved = reached(out, "fit", fit(Module(args.lr), out, args.saved))
    checkpoint = str(out / "saved.ckpt")
    resumed = reached(out, "resume", fit(Module(args.lr, seed=123), out, args.steps, checkpoint))
    if saved.global_rank == 0:
        report = {"saved": saved.report, "resumed": resumed.report}
        report["checkpoint_is_dir"] = (out / "saved.ckpt").is_dir()
        (out / "result.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
