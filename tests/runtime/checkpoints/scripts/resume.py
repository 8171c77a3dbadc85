"""Train real models through a strategy, stop, and resume from the checkpoint in a new job.

Run as ``python resume.py PHASE --devices N --cases JSON``, where JSON is a list of cases
``{"strategy", "options", "checkpoint", "out", "async_io"}``: each case is a launch of a
strategy of its own, one after the other in the processes of one job (the strategies' launcher
starts the other ranks, and keeps them for every later launch of the script). Rank 0 writes
each case's report next to its ``out`` (``.json``).

The model pairs two Hugging Face transformers built from configs (nothing is downloaded): a
GPT-2 language model whose output layer shares the token embedding's weight, and a ResNet
image classifier with BatchNorm layers. Each step trains on one fixed global batch, split
evenly across the ranks; one process standing in for the ranks (``--virtual-ranks``) is the
reference every strategy must match.

Phases:
    full    train STEPS steps; after step STOP save a checkpoint holding the model, the
            optimizer (AdamW), an LR scheduler, a gradient scaler, the RNG state, the step and
            a plain dict; write the final weights to OUT
    resume  build everything afresh (other initial weights, another scaler scale), restore it
            from the checkpoint, check what was restored, train on to STEPS; write the final
            weights to OUT
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

import stratlib

STEPS = 4
STOP = 2
GLOBAL_BATCH = 4
SCALE = 1024.0


class Pair(nn.Module):
    """A tied-embedding GPT-2 and a BatchNorm ResNet, trained on the sum of their losses."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import (
            GPT2Config,
            GPT2LMHeadModel,
            ResNetConfig,
            ResNetForImageClassification,
        )
        from transformers.utils import logging

        logging.set_verbosity_error()

        self.language = GPT2LMHeadModel(
            GPT2Config(
                vocab_size=64,
                n_positions=16,
                n_embd=16,
                n_layer=2,
                n_head=2,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                tie_word_embeddings=True,
                bos_token_id=0,
                eos_token_id=0,
            )
        )
        self.vision = ResNetForImageClassification(
            ResNetConfig(
                num_channels=3,
                embedding_size=8,
                hidden_sizes=[8, 16],
                depths=[1, 1],
                layer_type="basic",
                num_labels=4,
            )
        )

    def forward(
        self, tokens: torch.Tensor, images: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        language = self.language(input_ids=tokens, labels=tokens).loss
        vision = self.vision(pixel_values=images, labels=labels).loss
        return language + vision


def batch(step: int, rank: int, world_size: int) -> tuple[torch.Tensor, ...]:
    """This rank's share of step ``step``'s global batch."""
    generator = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, 64, (GLOBAL_BATCH, 12), generator=generator)
    images = torch.randn(GLOBAL_BATCH, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 4, (GLOBAL_BATCH,), generator=generator)
    size = GLOBAL_BATCH // world_size
    rows = slice(rank * size, (rank + 1) * size)
    return tokens[rows], images[rows], labels[rows]


def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, Any, Any]:
    torch.manual_seed(seed)
    model = Pair()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE if seed == 0 else 2.0)
    return model, optimizer, scheduler, scaler


#: Ranks one process stands in for (``--virtual-ranks``): it runs their shares one after the
#: other and averages their gradients, as data-parallel processes do. BatchNorm normalises
#: each rank's share with that share's statistics (SyncBatchNorm has no CPU kernels), so this,
#: not one pass over the whole batch, is what the ranks compute together.
VIRTUAL_RANKS = 1


def train(strategy: Any, model: nn.Module, optimizer: Any, scheduler: Any, steps: range) -> None:
    device = strategy.root_device
    for step in steps:
        if strategy.world_size == 1 and VIRTUAL_RANKS > 1:
            for rank in range(VIRTUAL_RANKS):
                inputs = [t.to(device) for t in batch(step, rank, VIRTUAL_RANKS)]
                strategy.backward(model(*inputs) / VIRTUAL_RANKS)
        else:
            rank, world_size = strategy.global_rank, strategy.world_size
            strategy.backward(model(*[t.to(device) for t in batch(step, rank, world_size)]))
        strategy.optimizer_step(optimizer)
        scheduler.step()


def full(strategy: Any, checkpoint: str, out: str) -> dict[str, Any]:
    model, optimizer, scheduler, scaler = build(seed=0)
    model, optimizer = strategy.setup(model, optimizer)
    train(strategy, model, optimizer, scheduler, range(STOP))
    state = {
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "rng": torch.get_rng_state(),
        "step": STOP,
        "meta": {"note": "stopped", "lr": scheduler.get_last_lr()},
    }
    strategy.save_checkpoint(state, checkpoint)
    train(strategy, model, optimizer, scheduler, range(STOP, STEPS))
    return _finish(strategy, model, out, {"saved_lr": state["meta"]["lr"]})


def resume(strategy: Any, checkpoint: str, out: str) -> dict[str, Any]:
    model, optimizer, scheduler, scaler = build(seed=1)
    model, optimizer = strategy.setup(model, optimizer)
    state: dict[str, Any] = {
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "rng": None,
        "step": 0,
    }
    remaining = strategy.load_checkpoint(checkpoint, state)
    report = {
        "remaining": sorted(remaining),
        "meta": remaining.get("meta"),
        "step": state["step"],
        "rng_restored": isinstance(state["rng"], torch.Tensor),
        "scheduler_epoch": scheduler.last_epoch,
        "lr": [group["lr"] for group in optimizer.param_groups],
        "scale": scaler.get_scale(),
    }
    torch.set_rng_state(state["rng"])
    train(strategy, model, optimizer, scheduler, range(state["step"], STEPS))
    return _finish(strategy, model, out, report)


def _finish(strategy: Any, model: nn.Module, out: str, report: dict[str, Any]) -> dict[str, Any]:
    weights = strategy.get_module_state_dict(model)  # collective: every rank takes part
    if strategy.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in weights.items()}, out)
    return {**report, "world_size": strategy.world_size}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["full", "resume"])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--virtual-ranks", type=int, default=1)
    args = parser.parse_args()
    global VIRTUAL_RANKS
    VIRTUAL_RANKS = args.virtual_ranks
    phase = full if args.phase == "full" else resume
    for case in json.loads(args.cases):
        options = dict(case.get("options", {}))
        if case.get("async_io"):
            options["checkpoint_io"] = stratlib.AsyncCheckpointIO()
        strategy = stratlib.get_strategy(
            case["strategy"], accelerator="cpu", devices=args.devices, **options
        )
        result = strategy.launch(phase, case["checkpoint"], case["out"])
        if result is not None and os.environ.get("LOCAL_RANK", "0") == "0":
            report = Path(case["out"]).with_suffix(".json")
            report.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
