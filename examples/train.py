"""Train a small classifier on scikit-learn's handwritten digits with any strategy.

The data set (1,797 8x8 images of the digits 0-9) ships inside scikit-learn, so nothing is
downloaded. The same script runs on one process or many, on whatever the strategy supports::

    python examples/train.py                                  # ddp, 2 CPU processes
    python examples/train.py --strategy ddp_spawn --devices 2 --precision bf16-mixed
    python examples/train.py --strategy single_device --devices 1 --epochs 3
    python examples/train.py --epochs 10 --resume             # continue from the checkpoint
    python examples/train.py --package mystrategies --strategy my_ddp   # your own package

Rank 0 prints progress, and after every epoch the mean training loss and the accuracy over
the whole validation set (each rank evaluates its shard; the counts are summed with the
strategy's collectives). A checkpoint is saved after every epoch; ``--resume`` continues from
the epoch after the one it holds.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DEFAULT_CHECKPOINT = Path("checkpoints") / "digits.ckpt"


# --- data and model -------------------------------------------------------------------------


def load_data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The digits, scaled to [0, 1], split 80/20 into training and validation sets.

    The split depends only on ``seed``, so every rank (and a resumed run) sees the same one.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit(
            "this example needs scikit-learn for its data set: pip install scikit-learn "
            "(or pip install 'stratgen[examples]')"
        ) from None
    digits = load_digits()
    images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(labels))
    train, val = order[:cut], order[cut:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[val], labels[val])


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


# --- progress ---------------------------------------------------------------------------------


class Progress:
    """A progress line for rank 0: redrawn in place on a terminal, a few lines otherwise."""

    def __init__(self, epoch: int, epochs: int, steps: int, enabled: bool) -> None:
        self.prefix = f"epoch {epoch}/{epochs}"
        self.steps = steps
        self.enabled = enabled
        self.live = enabled and sys.stderr.isatty()
        # Without a terminal, report at each quarter of the epoch.
        self.marks = {max(1, round(steps * q / 4)) for q in (1, 2, 3)}

    def update(self, step: int, loss: float) -> None:
        if not self.enabled:
            return
        if self.live:
            width = 30
            done = width * step // self.steps
            bar = "#" * done + "." * (width - done)
            sys.stderr.write(f"\r{self.prefix} [{bar}] {step}/{self.steps} loss {loss:.4f}")
            sys.stderr.flush()
        elif step in self.marks:
            print(f"{self.prefix}: step {step}/{self.steps}, loss {loss:.4f}", flush=True)

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\r" + " " * 72 + "\r")
            sys.stderr.flush()


# --- training ---------------------------------------------------------------------------------


def evaluate(strategy: Any, model: nn.Module, val: TensorDataset, batch_size: int) -> float:
    """Accuracy over the whole validation set.

    ``DistributedSampler`` pads the shards to equal length by repeating samples, so that every
    rank runs the same number of forward passes (sharded models need that). The padding is
    left out of the counts: a rank's real samples are the first ones of its shard.
    """
    sampler: DistributedSampler[Any] = DistributedSampler(
        val, shuffle=False, **strategy.distributed_sampler_kwargs
    )
    real = len(range(sampler.rank, len(val), sampler.num_replicas))
    loader = DataLoader(val, batch_size=batch_size, sampler=sampler)
    correct = torch.zeros((), dtype=torch.long, device=strategy.root_device)
    seen = 0
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(strategy.root_device), labels.to(strategy.root_device)
            keep = max(0, min(len(labels), real - seen))
            seen += len(labels)
            predicted = model(images).argmax(dim=-1)
            correct += (predicted[:keep] == labels[:keep]).sum()
    model.train()
    total_correct = strategy.reduce(correct, reduce_op="sum")
    total = strategy.reduce(torch.tensor(real, device=strategy.root_device), reduce_op="sum")
    return float(total_correct) / float(total)


def train(strategy: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """One process's share of the training; returns the history on rank 0."""
    torch.manual_seed(args.seed)
    train_set, val_set = load_data(args.seed)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer = strategy.setup(model, optimizer)

    checkpoint = Path(args.checkpoint)
    start = 1
    if args.resume:
        rest = strategy.load_checkpoint(checkpoint, state={"model": model, "optimizer": optimizer})
        start = int(rest["epoch"]) + 1
        if strategy.is_global_zero:
            print(f"resumed from {checkpoint} after epoch {rest['epoch']}", flush=True)

    sampler: DistributedSampler[Any] = DistributedSampler(
        train_set, shuffle=True, seed=args.seed, **strategy.distributed_sampler_kwargs
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    history: list[dict[str, float]] = []
    for epoch in range(start, args.epochs + 1):
        started = time.perf_counter()
        sampler.set_epoch(epoch)
        progress = Progress(epoch, args.epochs, len(loader), strategy.is_global_zero)
        loss_sum = torch.zeros((), device=strategy.root_device)
        for step, (images, labels) in enumerate(loader, start=1):
            images, labels = images.to(strategy.root_device), labels.to(strategy.root_device)
            loss = F.cross_entropy(model(images).float(), labels)
            strategy.backward(loss)
            strategy.optimizer_step(optimizer)
            loss_sum += loss.detach()
            progress.update(step, loss.item())
        progress.close()
        epoch_loss = float(strategy.reduce(loss_sum / len(loader), reduce_op="mean"))
        accuracy = evaluate(strategy, model, val_set, args.batch_size)
        state = {"model": model, "optimizer": optimizer, "epoch": epoch, "accuracy": accuracy}
        strategy.save_checkpoint(state, checkpoint)
        history.append({"epoch": epoch, "loss": epoch_loss, "accuracy": accuracy})
        if strategy.is_global_zero:
            seconds = time.perf_counter() - started
            print(
                f"epoch {epoch}/{args.epochs}: loss {epoch_loss:.4f}, "
                f"val accuracy {accuracy:.4f} ({seconds:.1f} s), saved {checkpoint}",
                flush=True,
            )
    if not strategy.is_global_zero:
        return None
    return {"start": start, "history": history}


# --- command line -----------------------------------------------------------------------------


def devices_arg(text: str) -> int | str:
    """'2' -> 2; 'auto', '-1' and '0,1' are passed on as the strategy factory takes them."""
    try:
        return int(text)
    except ValueError:
        return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train a digit classifier with a strategy from a stratgen-generated package."
    )
    parser.add_argument("--strategy", default="ddp", help="registry name (default: ddp)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda, ... (default: auto)")
    parser.add_argument(
        "--devices", type=devices_arg, default=2, help="devices per node (default: 2)"
    )
    parser.add_argument("--num-nodes", type=int, default=1, help="machines (default: 1)")
    parser.add_argument(
        "--precision", default=None, help="e.g. 32-true, bf16-mixed (default: the strategy's)"
    )
    parser.add_argument("--epochs", type=int, default=5, help="last epoch to train (default: 5)")
    parser.add_argument("--batch-size", type=int, default=32, help="per process (default: 32)")
    parser.add_argument(
        "--lr", type=float, default=3e-3, help="Adam's learning rate (default: 3e-3)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint",
        default=str(DEFAULT_CHECKPOINT),
        help=f"file saved after every epoch (default: {DEFAULT_CHECKPOINT})",
    )
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument(
        "--package",
        default="stratlib",
        help="generated package to take the strategy from (default: stratlib)",
    )
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.resume and not Path(args.checkpoint).exists():
        parser.error(f"--resume: there is no checkpoint at {args.checkpoint}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    package = importlib.import_module(args.package)
    try:
        strategy = package.get_strategy(
            args.strategy,
            accelerator=args.accelerator,
            devices=args.devices,
            num_nodes=args.num_nodes,
            precision=args.precision,
        )
    except package.MisconfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = strategy.launch(train, args)
    if result is None:  # a rank other than 0
        return 0
    history = result["history"]
    if history:
        last = history[-1]
        print(f"done: epoch {last['epoch']}, val accuracy {last['accuracy']:.4f}")
    else:
        print(f"nothing to do: the checkpoint is already at epoch {result['start'] - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
