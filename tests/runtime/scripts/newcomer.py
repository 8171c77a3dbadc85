"""Training written the way the package's documentation shows it to newcomers.

The runtime tests start this script as users would: with plain ``python`` (the strategy starts
or spawns the other ranks), under ``torchrun``, or once per node. Rank 0 writes what it
learned to ``--out``/result.json.

Each optimizer step accumulates the gradients of ``--accumulate`` micro-batches per rank
(``block_backward_sync`` skips the synchronisation of all but the last), and the ranks read
their shares of the data through torch's DistributedSampler, so one step equals one SGD step
on the whole data set in a single process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import stratlib


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def build_dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 8, generator=generator)
    y = torch.randn(16, 1, generator=generator)
    return TensorDataset(x, y)


def train(strategy: stratlib.StrategyBase, epochs: int, accumulate: int, folder: str) -> dict:
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)

    dataset = build_dataset()
    sampler = DistributedSampler(dataset, shuffle=False, **strategy.distributed_sampler_kwargs)
    per_rank = len(dataset) // strategy.world_size
    loader = DataLoader(dataset, batch_size=per_rank // accumulate, sampler=sampler)

    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for index, (x, y) in enumerate(loader):
            x, y = x.to(strategy.root_device), y.to(strategy.root_device)
            last = (index + 1) % accumulate == 0
            with contextlib.nullcontext() if last else strategy.block_backward_sync():
                loss = nn.functional.mse_loss(model(x).float(), y) / accumulate
                strategy.backward(loss)
            if last:
                strategy.optimizer_step(optimizer)
        losses.append(strategy.reduce(loss.detach() * accumulate, reduce_op="mean").item())

    path = Path(folder) / "ckpt" / "last.ckpt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": epochs}, path)
    checkpoint = strategy.load_checkpoint(path)
    every_rank_loaded = strategy.reduce_boolean_decision(checkpoint["step"] == epochs, all=True)
    seen = strategy.all_gather(torch.tensor(sorted(sampler), device=strategy.root_device))
    return {
        "params": [
            t.detach().cpu().double().tolist()
            for t in strategy.get_module_state_dict(model).values()
        ],
        "losses": losses,
        # A tensor, as the documentation's example returns: it must reach the caller intact.
        "last_loss": strategy.reduce(loss.detach() * accumulate, reduce_op="mean"),
        "world_size": strategy.world_size,
        "global_rank": strategy.global_rank,
        "node_rank": strategy.node_rank,
        "sampler": strategy.distributed_sampler_kwargs,
        "samples_seen": sorted(seen.flatten().tolist()),
        "every_rank_loaded": every_rank_loaded,
        "strategy": type(strategy).__name__,
        "environment": type(strategy.cluster_environment).__name__,
        "precision": strategy.precision_plugin.precision,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    strategy = stratlib.get_strategy(
        args.strategy,
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
    )
    result = strategy.launch(train, args.epochs, args.accumulate, args.out)
    if strategy.global_rank == 0:
        assert (
            isinstance(result["last_loss"], torch.Tensor)
            and result["last_loss"].device.type == "cpu"
        )
        result["last_loss"] = result["last_loss"].item()
        Path(args.out, "result.json").write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
