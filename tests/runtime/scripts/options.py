"""Strategy options and custom strategies, one launch each in one job of 2 DDP ranks.

1. A subclass overriding ``configure_ddp(self)`` as Lightning's documentation shows it,
   constructed directly.
2. A subclass overriding ``configure_ddp(self, module)``, passed to ``get_strategy`` as a class.
3. 'ddp_find_unused_parameters_true' with a model whose second head is never used.
4. ``static_graph=True``, ``process_group_backend='gloo'`` and a timeout.
5. An AsyncCheckpointIO: rank 0 queues saves, every rank loads right after.
6. ``block_backward_sync``: inside it each rank keeps its own gradients.
7. ``sync_batchnorm=True`` with a BatchNorm model: torch cannot synchronise batch statistics
   of CPU tensors, so setup must refuse with the reason (the last launch: it fails).

Rank 0 writes every launch's report to ``--out``/result.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import stratlib


class TrackedDDP(DistributedDataParallel):
    """DistributedDataParallel under another name, to see that a custom wrapper was used."""


class SeedsStyleDDPStrategy(stratlib.DDPStrategy):
    def configure_ddp(self) -> None:
        self.model = TrackedDDP(self.model, device_ids=None, **self.ddp_kwargs())


class ModuleStyleDDPStrategy(stratlib.DDPStrategy):
    def configure_ddp(self, module: nn.Module) -> nn.Module:
        return TrackedDDP(module, device_ids=None, **self.ddp_kwargs())


class TwoHeads(nn.Module):
    """The reference model plus a head that the forward pass never uses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.unused = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def reference_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def batch_norm_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))


def process_group_timeout() -> float:
    group = torch.distributed.distributed_c10d._get_default_group()
    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


def train(strategy: stratlib.StrategyBase, build: str, steps: int = 3) -> dict:
    model = {"reference": reference_model, "two_heads": TwoHeads, "batch_norm": batch_norm_model}[
        build
    ]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)
    share = 16 // strategy.world_size
    rows = slice(strategy.global_rank * share, (strategy.global_rank + 1) * share)
    for _ in range(steps):
        strategy.backward(nn.functional.mse_loss(model(x[rows]), y[rows]))
        strategy.optimizer_step(optimizer, zero_grad=False)
        unused_grad = getattr(strategy.lightning_module, "unused", None)
        unused_grad = None if unused_grad is None else unused_grad.weight.grad
        optimizer.zero_grad()
    state = strategy.get_module_state_dict(model)
    keys = [k for k in state if not k.startswith("unused.")]
    return {
        "wrapper": type(model).__name__,
        "params": [state[k].detach().double().tolist() for k in keys],
        "unused_head_got_gradients": unused_grad is not None,
        "backend": torch.distributed.get_backend(),
        "process_group_timeout": process_group_timeout(),
        "world_size": strategy.world_size,
        "options": {
            "find_unused_parameters": getattr(strategy, "find_unused_parameters", None),
            "static_graph": getattr(strategy, "static_graph", None),
            "timeout": getattr(strategy, "timeout", None),
            "process_group_backend": getattr(strategy, "process_group_backend", None),
        },
    }


def save_and_load(strategy: stratlib.StrategyBase, folder: str) -> dict:
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    path = Path(folder) / "async" / "last.ckpt"
    for step in range(3):
        strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": step}, path)
    # Every rank reads at once: rank 0's queued saves must be complete by then.
    loaded = strategy.load_checkpoint(path)
    return {
        "checkpoint_io": type(strategy.checkpoint_io).__name__,
        "every_rank_read_the_last_save": strategy.reduce_boolean_decision(
            loaded["step"] == 2, all=True
        ),
    }


def gradients_of_every_rank(strategy: stratlib.StrategyBase, model: nn.Module) -> torch.Tensor:
    grads = torch.cat([p.grad.flatten() for p in strategy.lightning_module.parameters()])
    return strategy.all_gather(grads)


def accumulate(strategy: stratlib.StrategyBase) -> dict:
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = strategy.setup(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)
    share = 16 // strategy.world_size
    rows = slice(strategy.global_rank * share, (strategy.global_rank + 1) * share)
    with strategy.block_backward_sync():
        strategy.backward(nn.functional.mse_loss(model(x[rows]), y[rows]))
    inside = gradients_of_every_rank(strategy, model)
    strategy.backward(nn.functional.mse_loss(model(x[rows]), y[rows]))
    after = gradients_of_every_rank(strategy, model)
    return {
        "ranks_differ_inside_block": not torch.allclose(inside[0], inside[1]),
        "ranks_agree_after_block": torch.allclose(after[0], after[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cpu = torch.device("cpu")
    reports: dict[str, object] = {}

    direct = SeedsStyleDDPStrategy(
        accelerator=stratlib.CPUAccelerator(), parallel_devices=[cpu, cpu]
    )
    reports["seeds_style"] = direct.launch(train, "reference")

    by_class = stratlib.get_strategy(ModuleStyleDDPStrategy, accelerator="cpu", devices=2)
    reports["module_style"] = by_class.launch(train, "reference")

    unused = stratlib.get_strategy("ddp_find_unused_parameters_true", accelerator="cpu", devices=2)
    reports["find_unused_parameters"] = unused.launch(train, "two_heads")

    static = stratlib.get_strategy(
        "ddp",
        accelerator="cpu",
        devices=2,
        static_graph=True,
        process_group_backend="gloo",
        timeout=60.0,
    )
    reports["static_graph"] = static.launch(train, "reference")

    queued = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=2, checkpoint_io=stratlib.AsyncCheckpointIO()
    )
    reports["async_checkpoint"] = queued.launch(save_and_load, args.out)

    reports["block_backward_sync"] = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=2
    ).launch(accumulate)

    synced = stratlib.get_strategy("ddp", accelerator="cpu", devices=2, sync_batchnorm=True)
    try:
        synced.launch(train, "batch_norm")
    except stratlib.MisconfigurationError as error:
        reports["sync_batchnorm_error"] = str(error)
    if synced.global_rank == 0:
        Path(args.out, "result.json").write_text(json.dumps(reports), encoding="utf-8")


if __name__ == "__main__":
    main()
