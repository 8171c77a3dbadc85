"""Two-rank scenarios of the checkpoint and launch fixes; rank 0 prints ``RESULT <json>``.

Run as ``python fixes.py SCENARIO FOLDER``:
    spawn_large      ddp_spawn returns a 4 MB tensor and a state dict to the caller
    fsdp_load_only   fsdp: a launch that sets up, loads a checkpoint and returns without a
                     single forward pass, after a launch that saved it
    reduce           ddp: reduce of numbers, dicts and lists over two ranks
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import stratlib


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def large(strategy: Any) -> dict[str, Any]:
    return {"big": torch.arange(1_000_000, dtype=torch.float32), "state": _model().state_dict()}


def save(strategy: Any, path: str) -> None:
    model = strategy.setup(_model())
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(0.25)
    strategy.save_checkpoint({"model": model, "epoch": 3}, path)


def load_only(strategy: Any, path: str) -> dict[str, Any]:
    model = strategy.setup(_model())
    state = {"model": model, "epoch": 0}
    strategy.load_checkpoint(path, state)
    weights = strategy.get_module_state_dict(model)
    return {
        "epoch": state["epoch"],
        "values": sorted(
            {float(v.unique()[0]) for v in weights.values()} if strategy.is_global_zero else []
        ),
    }


def reduce(strategy: Any) -> dict[str, Any]:
    rank = strategy.global_rank
    summed = strategy.reduce(
        {"count": rank + 1, "parts": [torch.tensor([rank, 2.0]), 3]}, reduce_op="sum"
    )
    mean = strategy.reduce(rank)
    return {
        "count": summed["count"].item(),
        "parts": [summed["parts"][0].tolist(), summed["parts"][1].item()],
        "mean": mean.item(),
        "mean_dtype": str(mean.dtype),
    }


def main() -> None:
    scenario, folder = sys.argv[1], Path(sys.argv[2])
    result: Any
    if scenario == "spawn_large":
        strategy = stratlib.get_strategy("ddp_spawn", accelerator="cpu", devices=2)
        returned = strategy.launch(large)
        result = {
            "numel": returned["big"].numel(),
            "last": returned["big"][-1].item(),
            "keys": sorted(returned["state"]),
        }
    elif scenario == "fsdp_load_only":
        strategy = stratlib.get_strategy("fsdp", accelerator="cpu", devices=2)
        path = str(folder / "weights.ckpt")
        strategy.launch(save, path)
        result = strategy.launch(load_only, path)
    elif scenario == "reduce":
        result = stratlib.get_strategy("ddp", accelerator="cpu", devices=2).launch(reduce)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    if result is not None and os.environ.get("LOCAL_RANK", "0") == "0":  # rank 0 reports
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
